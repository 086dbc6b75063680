package httpfn

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
)

func TestPublicAddr(t *testing.T) {
	tests := []struct {
		ip   string
		want bool
	}{
		{"8.8.8.8", true},
		{"93.184.216.34", true},
		{"2606:4700::1111", true},
		{"127.0.0.1", false},
		{"127.255.1.2", false},
		{"10.1.2.3", false},
		{"172.16.0.1", false},
		{"192.168.1.1", false},
		{"169.254.169.254", false}, // cloud metadata
		{"0.0.0.0", false},
		{"0.1.2.3", false},
		{"100.100.100.200", false}, // carrier-grade NAT, a cloud's metadata
		{"224.0.0.1", false},
		{"255.255.255.255", false},
		{"::1", false},
		{"::", false},
		{"::ffff:127.0.0.1", false}, // IPv4-mapped loopback
		{"::ffff:8.8.8.8", true},
		{"::127.0.0.1", false}, // IPv4-compatible
		{"fe80::1", false},
		{"fc00::1", false},
		{"fd00:ec2::254", false},
		{"ff02::1", false},
		{"64:ff9b::7f00:1", false}, // NAT64 of 127.0.0.1
		{"64:ff9b::808:808", true}, // NAT64 of 8.8.8.8
		{"2002:7f00:1::", false},   // 6to4 of 127.0.0.1
		{"2002:808:808::", true},   // 6to4 of 8.8.8.8
		{"2001:db8::1", false},
	}
	for _, tt := range tests {
		if got := publicAddr(netip.MustParseAddr(tt.ip)); got != tt.want {
			t.Errorf("publicAddr(%s) = %v, want %v", tt.ip, got, tt.want)
		}
	}
	if publicAddr(netip.Addr{}) {
		t.Error("publicAddr(zero Addr) = true, want false")
	}
}

// The guard refuses a loopback address before connecting, whether it is written as an
// IP, resolved from a name, or among other, public answers; nothing reaches the listener.
func TestGuardRefusesBeforeDialling(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	var lookups atomic.Int64
	lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
		lookups.Add(1)
		switch host {
		case "rebind.test":
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		case "mixed.test": // a public answer first, loopback second
			return []netip.Addr{netip.MustParseAddr("8.8.8.8"), netip.MustParseAddr("127.0.0.1")}, nil
		case "mapped.test":
			return []netip.Addr{netip.MustParseAddr("::ffff:127.0.0.1")}, nil
		}
		return nil, errors.New("no such host")
	}
	g := newGuard(false, lookup)
	for _, host := range []string{"127.0.0.1", "rebind.test", "mixed.test", "mapped.test", "::ffff:127.0.0.1"} {
		addr := net.JoinHostPort(host, strconv.Itoa(port))
		c, err := g.DialContext(context.Background(), "tcp", addr)
		if c != nil {
			c.Close()
		}
		var denied *addressDeniedError
		if !errors.As(err, &denied) {
			t.Errorf("DialContext(%s) = %v, want an addressDeniedError", addr, err)
		}
	}
	// The Control hook refuses what a dial would connect to, even past DialContext.
	if c, err := g.dialer.DialContext(context.Background(), "tcp", ln.Addr().String()); err == nil {
		c.Close()
		t.Error("dialer.DialContext(loopback) = nil error, want the Control hook to refuse it")
	} else if denied := new(addressDeniedError); !errors.As(err, &denied) {
		t.Errorf("dialer.DialContext(loopback) = %v, want an addressDeniedError", err)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("listener accepted %d connections, want 0", n)
	}

	// With AllowPrivate the same names connect.
	g = newGuard(true, lookup)
	c, err := g.DialContext(context.Background(), "tcp", net.JoinHostPort("rebind.test", strconv.Itoa(port)))
	if err != nil {
		t.Fatalf("DialContext with AllowPrivate = %v", err)
	}
	c.Close()

	// A lookup failure is a lookupError.
	_, err = g.DialContext(context.Background(), "tcp", "nowhere.test:80")
	if le := new(lookupError); !errors.As(err, &le) {
		t.Errorf("DialContext(nowhere.test) = %v, want a lookupError", err)
	}
}
