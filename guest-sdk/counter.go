package fleet

import "github.com/fleethost/fleet/abi"

// CounterClient changes and reads one fleet-wide atomic counter. Increments are never
// lost: 10 slots each adding 1 a hundred times end at exactly 1000.
type CounterClient struct {
	name string
}

// Counter returns the client of the counter name, such as "scraper:scraped". A counter
// never touched is 0.
func Counter(name string) CounterClient { return CounterClient{name: name} }

// Incr adds 1 and returns the new value.
func (c CounterClient) Incr() (int64, error) { return c.IncrBy(1) }

// Decr subtracts 1 and returns the new value.
func (c CounterClient) Decr() (int64, error) { return c.IncrBy(-1) }

// IncrBy adds n (negative to subtract) and returns the new value. IncrBy(0) reads the
// value, like Get.
func (c CounterClient) IncrBy(n int64) (int64, error) {
	if n == 0 {
		return c.Get() // the wire reads delta 0 as 1
	}
	var reply abi.CounterReply
	err := send(abi.OpCounterIncr, abi.CounterIncrRequest{Name: c.name, Delta: n}.AppendJSON, &reply)
	return reply.Value, err
}

// Get returns the current value.
func (c CounterClient) Get() (int64, error) {
	var reply abi.CounterReply
	err := send(abi.OpCounterGet, abi.CounterGetRequest{Name: c.name}.AppendJSON, &reply)
	return reply.Value, err
}
