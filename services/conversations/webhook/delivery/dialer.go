package delivery

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

// Resolver finds the addresses of a host name (net.Resolver does).
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Dialer connects to webhook endpoints. It resolves the host itself and
// dials each address it got in turn; every dial passes the address check
// in net.Dialer.Control, which runs on the address actually connected
// to, after DNS. So a name resolving to a refused address (DNS rebinding
// included: a second resolution is checked again) is never connected to.
// Only addresses the IANA special-purpose registries mark globally
// reachable pass (code.dny.dev/ssrf builds its lists from them; IPv6
// outside 2000::/3 is refused, which covers IPv4-mapped and -compatible
// forms, NAT64 and the rest), except the configured allowed ranges.
type Dialer struct {
	resolver Resolver
	guardian *ssrf.Guardian
	allowed  []netip.Prefix
	dialer   net.Dialer
}

// NewDialer returns a Dialer that also allows the prefixes in allowed;
// resolver nil means the system's.
func NewDialer(allowed []netip.Prefix, resolver Resolver) *Dialer {
	var v4, v6 []netip.Prefix
	for _, p := range allowed {
		if p.Addr().Is4() {
			v4 = append(v4, p)
		} else {
			v6 = append(v6, p)
		}
	}
	if resolver == nil {
		resolver = net.DefaultResolver
	}
	d := &Dialer{
		resolver: resolver,
		allowed:  allowed,
		guardian: ssrf.New(ssrf.WithAnyPort(), ssrf.WithAllowedV4Prefixes(v4...), ssrf.WithAllowedV6Prefixes(v6...)),
	}
	d.dialer = net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second, Control: d.control}
	return d
}

// ParseAllowedCIDRs parses a list of CIDRs (CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS).
func ParseAllowedCIDRs(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%q is not a CIDR such as 127.0.0.0/8 or ::1/128", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// RefusedError is an address the Dialer will not connect to.
type RefusedError struct {
	Host string
	Addr netip.Addr
}

func (e *RefusedError) Error() string {
	host := ""
	if e.Host != "" && e.Host != e.Addr.String() {
		host = e.Host + " resolves to "
	}
	return fmt.Sprintf("refused: %s%s is not a globally reachable address (not dialled; an operator may allow a range with CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS)", host, e.Addr)
}

// Check reports whether addr may be dialled: the one rule of the
// dialler, which endpoint URLs naming an address are also checked by. An
// IPv4-mapped address is judged as the IPv4 address it is dialled as.
func (d *Dialer) Check(addr netip.Addr) error {
	addr = addr.Unmap()
	for _, p := range d.allowed {
		if p.Contains(addr) {
			return nil
		}
	}
	if err := d.guardian.SafeAddr(addr); err != nil {
		return &RefusedError{Addr: addr}
	}
	return nil
}

func (d *Dialer) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("dial %s: %w", address, err)
	}
	return d.Check(ap.Addr())
}

// DialContext resolves address's host and dials its addresses in turn
// (each checked in control); the first connection wins.
func (d *Dialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
		addrs = []netip.Addr{a}
	} else if addrs, err = d.resolver.LookupNetIP(ctx, "ip", host); err != nil {
		return nil, err
	}
	var firstErr error
	for _, a := range addrs {
		conn, err := d.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return conn, nil
		}
		var refused *RefusedError
		if errors.As(err, &refused) {
			refused.Host = host
		}
		if firstErr == nil {
			firstErr = err
		}
		if ctx.Err() != nil {
			break
		}
	}
	if firstErr == nil {
		firstErr = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	return nil, firstErr
}
