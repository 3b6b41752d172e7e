package web

import (
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/labstack/echo/v5"
)

// ClientIP returns how c.RealIP() finds the client's address.
//
// Without trusted proxies it is the TCP peer, and X-Forwarded-For is
// ignored. With trusted proxies, X-Forwarded-For is read from the right:
// the client is the first address that is not a trusted proxy (the TCP peer
// included, so a request that does not come from a trusted proxy is
// answered by its peer address, whatever its header says). Nothing is
// trusted but the given prefixes: Echo would otherwise trust every
// loopback, link-local and private address by default, which would let any
// pod or host of the private network forge its address.
func ClientIP(trusted []netip.Prefix) echo.IPExtractor {
	if len(trusted) == 0 {
		return echo.ExtractIPDirect()
	}
	opts := []echo.TrustOption{echo.TrustLoopback(false), echo.TrustLinkLocal(false), echo.TrustPrivateNet(false)}
	for _, p := range trusted {
		p = p.Masked()
		opts = append(opts, echo.TrustIPRange(&net.IPNet{
			IP:   p.Addr().AsSlice(),
			Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
		}))
	}
	return echo.ExtractIPFromXFFHeader(opts...)
}

// ParseTrustedProxies parses a list of CIDR prefixes ("10.0.0.0/8",
// "fd00::/8") or single addresses ("192.0.2.10"); blank entries are
// skipped, so an empty environment variable means none.
func ParseTrustedProxies(list []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		if !strings.Contains(s, "/") {
			addr, err := netip.ParseAddr(s)
			if err != nil || addr.Zone() != "" {
				return nil, fmt.Errorf("trusted proxy %q is neither an address nor a CIDR prefix", s)
			}
			out = append(out, netip.PrefixFrom(addr.Unmap(), addr.Unmap().BitLen()))
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("trusted proxy %q is neither an address nor a CIDR prefix", s)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
