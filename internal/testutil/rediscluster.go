package testutil

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a real Redis Cluster that a test owns: three masters, no replicas,
// each a redis-server with cluster mode on, its own directory and two free loopback
// ports (clients, cluster bus), joined with `redis-cli --cluster create`. Close kills
// every node.
//
// Three masters is the smallest cluster redis-cli creates, and enough for keys of one
// operation that hashed to different slots to land on different nodes, which is what
// the tests need to see refused.
type RedisCluster struct {
	Nodes []*Redis // the masters, in the order redis-cli gave them slots
}

// clusterHint is how a developer gets redis-cli, which joins the nodes.
const clusterHint = "install it with: apt-get update && apt-get install -y redis-tools (or run `make test`, which does)"

// StartRedisCluster starts three cluster-mode servers, joins them and waits until every
// node says cluster_state:ok. A missing redis-server or redis-cli is a failure, never a
// skip.
func StartRedisCluster() (*RedisCluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("testutil: redis-cli not found on PATH; %s", clusterHint)
	}
	rc := &RedisCluster{}
	for range 3 {
		n, err := startRedis(true, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000")
		if err != nil {
			rc.Close()
			return nil, err
		}
		rc.Nodes = append(rc.Nodes, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	args := append([]string{"--cluster", "create"}, rc.addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		rc.Close()
		return nil, fmt.Errorf("testutil: redis-cli --cluster create %s: %v\n%s", strings.Join(rc.addrs(), " "), err, out)
	}
	if err := rc.waitOK(ctx); err != nil {
		rc.Close()
		return nil, err
	}
	return rc, nil
}

// NewRedisCluster starts a cluster for one test and stops it when the test ends.
func NewRedisCluster(tb testing.TB) *RedisCluster {
	tb.Helper()
	rc, err := StartRedisCluster()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(rc.Close)
	return rc
}

// waitOK waits until every node knows all three and serves every slot: the nodes learn
// of each other over the bus after redis-cli has assigned the slots, so a client that
// came earlier could be sent to a node that does not know its slot's owner yet.
func (rc *RedisCluster) waitOK(ctx context.Context) error {
	for _, n := range rc.Nodes {
		c := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
		var info string
		var err error
		for {
			info, err = c.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if ctx.Err() != nil {
				c.Close()
				return fmt.Errorf("testutil: cluster node %s not ok: %v\n%s", n.Addr, err, strings.TrimSpace(info))
			}
			time.Sleep(20 * time.Millisecond)
		}
		c.Close()
	}
	return nil
}

func (rc *RedisCluster) addrs() []string {
	a := make([]string, len(rc.Nodes))
	for i, n := range rc.Nodes {
		a[i] = n.Addr
	}
	return a
}

// URL is the redis+cluster:// URL that names every node as a seed, as an operator writes
// it for fleet-host's --redis.
func (rc *RedisCluster) URL() string {
	a := rc.addrs()
	u := "redis+cluster://" + a[0]
	for i, addr := range a[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + addr
	}
	return u
}

// Client returns a new cluster client of the nodes; the caller closes it.
func (rc *RedisCluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: rc.addrs()})
}

// Flush empties every node, for a test that wants a clean slate on a shared cluster.
func (rc *RedisCluster) Flush(tb testing.TB) {
	tb.Helper()
	for _, n := range rc.Nodes {
		n.Flush(tb)
	}
}

// Close kills every node and removes their directories.
func (rc *RedisCluster) Close() {
	for _, n := range rc.Nodes {
		n.Close()
	}
}
