package httpfn

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"syscall"
	"time"
)

// nonPublic lists the address ranges refused unless Policy.AllowPrivate, beyond what
// netip.Addr's own predicates (loopback, private, link-local, multicast, unspecified)
// already cover.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT, used for cloud metadata too
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the broadcast address
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated)
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("fec0::/10"),       // site-local (deprecated)
}

// Prefixes that embed an IPv4 address, which is checked in turn.
var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96") // the IPv4 address in the last 32 bits
	sixToFour = netip.MustParsePrefix("2002::/16")    // the IPv4 address in bits 16..48
)

// publicAddr reports whether ip may be dialled without Policy.AllowPrivate.
func publicAddr(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsLoopback() || ip.IsPrivate() || ip.IsUnspecified() ||
		ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.IsMulticast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	if ip.Is6() {
		b := ip.As16()
		switch {
		case nat64.Contains(ip):
			return publicAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case sixToFour.Contains(ip):
			return publicAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		}
	}
	return true
}

// addressDeniedError is a dial refused because the address is not public.
type addressDeniedError struct {
	host string // as asked for
	ip   netip.Addr
}

func (e *addressDeniedError) Error() string {
	if e.host == "" || e.host == e.ip.String() {
		return fmt.Sprintf("httpfn: address %s is not public and private addresses are not granted", e.ip)
	}
	return fmt.Sprintf("httpfn: host %q resolves to %s, which is not public, and private addresses are not granted", e.host, e.ip)
}

// lookupError is a failed name resolution.
type lookupError struct {
	host string
	err  error
}

func (e *lookupError) Error() string { return fmt.Sprintf("httpfn: resolve %q: %v", e.host, e.err) }
func (e *lookupError) Unwrap() error { return e.err }

// LookupFunc resolves a host name to its addresses. It must honour ctx.
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

// guard dials only addresses its policy allows: it resolves the name itself, checks
// every address, then dials the checked addresses, so that no second resolution can
// swap in another (DNS rebinding). Immutable after construction; safe for concurrent use.
type guard struct {
	allowPrivate bool
	lookup       LookupFunc
	dialer       net.Dialer
}

func newGuard(allowPrivate bool, lookup LookupFunc) *guard {
	g := &guard{allowPrivate: allowPrivate, lookup: lookup}
	if g.lookup == nil {
		g.lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if !allowPrivate {
		// Defence in depth: whatever dials through this dialer, the socket is checked
		// once more against the address actually connected to.
		g.dialer.Control = func(network, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("httpfn: dial %s: unparsable address", address)
			}
			if !publicAddr(ap.Addr()) {
				return &addressDeniedError{ip: ap.Addr()}
			}
			return nil
		}
	}
	return g
}

// DialContext is the http.Transport's dial for direct requests.
func (g *guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	port, err := strconv.ParseUint(portStr, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("httpfn: dial %s: bad port", addr)
	}
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else {
		ips, err = g.lookup(ctx, host)
		if err != nil {
			return nil, &lookupError{host: host, err: err}
		}
		if len(ips) == 0 {
			return nil, &lookupError{host: host, err: errors.New("no addresses")}
		}
	}
	if !g.allowPrivate {
		// One bad address refuses the name: a name that answers both a public and a
		// loopback address is a rebinding attempt, not a flaky resolver.
		for _, ip := range ips {
			if !publicAddr(ip) {
				return nil, &addressDeniedError{host: host, ip: ip}
			}
		}
	}
	var first error
	for i, ip := range ips {
		if network == "tcp4" && !ip.Unmap().Is4() || network == "tcp6" && !ip.Is6() {
			continue
		}
		c, err := g.dialOne(ctx, network, netip.AddrPortFrom(ip, uint16(port)), len(ips)-i)
		if err == nil {
			return c, nil
		}
		if first == nil {
			first = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if first == nil {
		first = fmt.Errorf("httpfn: dial %s: no %s address", addr, network)
	}
	return nil, first
}

// dialOne dials one of the addresses left. Like net.Dialer's own serial fallback, it
// gives each address its share of the time that remains (at least 2s), so that one
// black-holed address does not spend the whole timeout.
func (g *guard) dialOne(ctx context.Context, network string, ap netip.AddrPort, left int) (net.Conn, error) {
	if deadline, ok := ctx.Deadline(); ok && left > 1 {
		share := time.Until(deadline) / time.Duration(left)
		if share < 2*time.Second {
			share = min(2*time.Second, time.Until(deadline))
		}
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, share)
		defer cancel()
	}
	return g.dialer.DialContext(ctx, network, ap.String())
}
