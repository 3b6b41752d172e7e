package web_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/web"
)

// realIP sends a request from peer with the given X-Forwarded-For headers
// through web.New and returns what the handler saw as c.RealIP().
func realIP(t *testing.T, trusted []netip.Prefix, peer string, xff ...string) string {
	t.Helper()
	e := web.New(web.Config{TrustedProxies: trusted})
	var got string
	e.GET("/", func(c *echo.Context) error {
		got = c.RealIP()
		return c.NoContent(http.StatusNoContent)
	})
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	req.RemoteAddr = peer
	for _, v := range xff {
		req.Header.Add("X-Forwarded-For", v)
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	if rec.Code != http.StatusNoContent {
		t.Fatalf("status %d", rec.Code)
	}
	return got
}

func prefixes(t *testing.T, s ...string) []netip.Prefix {
	t.Helper()
	p, err := web.ParseTrustedProxies(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClientIP(t *testing.T) {
	lb := prefixes(t, "10.0.0.0/8", "2001:db8:ffff::/48")
	for _, tc := range []struct {
		name    string
		trusted []netip.Prefix
		peer    string
		xff     []string
		want    string
	}{
		{"no proxies: the peer, header ignored", nil, "127.0.0.1:5000", []string{"203.0.113.9"}, "127.0.0.1"},
		{"no proxies: private peer, header ignored", nil, "10.1.2.3:5000", []string{"203.0.113.9"}, "10.1.2.3"},
		{"trusted peer: the forwarded client", lb, "10.1.2.3:5000", []string{"203.0.113.9"}, "203.0.113.9"},
		{"trusted peer without header: the peer", lb, "10.1.2.3:5000", nil, "10.1.2.3"},
		{"untrusted peer: header ignored", lb, "198.51.100.4:5000", []string{"203.0.113.9"}, "198.51.100.4"},
		// Echo trusts loopback and private ranges by default; configured
		// proxies replace that default.
		{"loopback is not trusted by default", lb, "127.0.0.1:5000", []string{"203.0.113.9"}, "127.0.0.1"},
		{"other private ranges are not trusted", lb, "192.168.1.1:5000", []string{"203.0.113.9"}, "192.168.1.1"},
		{"link-local is not trusted", lb, "[fe80::1]:5000", []string{"203.0.113.9"}, "fe80::1"},
		// A client's own X-Forwarded-For entries are to the left of what
		// the proxies append: the rightmost untrusted address wins.
		{"forged entries on the left are skipped", lb, "10.1.2.3:5000", []string{"1.1.1.1, 203.0.113.9"}, "203.0.113.9"},
		{"a chain of trusted proxies", lb, "10.1.2.3:5000", []string{"203.0.113.9, 10.9.9.9", "10.8.8.8"}, "203.0.113.9"},
		{"IPv6 proxy", lb, "[2001:db8:ffff::1]:5000", []string{"2001:db8:1::7"}, "2001:db8:1::7"},
		{"single address as proxy", prefixes(t, "127.0.0.1"), "127.0.0.1:5000", []string{"203.0.113.9"}, "203.0.113.9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := realIP(t, tc.trusted, tc.peer, tc.xff...); got != tc.want {
				t.Errorf("RealIP = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestParseTrustedProxies(t *testing.T) {
	got, err := web.ParseTrustedProxies([]string{" 10.1.2.3/8 ", "", "192.0.2.10", "fd00::/8", "::ffff:192.0.2.11"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.0.0.0/8", "192.0.2.10/32", "fd00::/8", "192.0.2.11/32"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i].String() != want[i] {
			t.Errorf("entry %d = %v, want %s", i, got[i], want[i])
		}
	}
	if got, err := web.ParseTrustedProxies([]string{""}); err != nil || len(got) != 0 {
		t.Errorf("blank list = %v, %v; want none", got, err)
	}
	for _, bad := range []string{"10.0.0.0/33", "proxy.internal", "10.0.0", "fe80::1%eth0"} {
		if _, err := web.ParseTrustedProxies([]string{bad}); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
