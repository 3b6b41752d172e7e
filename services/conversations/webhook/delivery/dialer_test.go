package delivery_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations/webhook"
	"github.com/acme/platform/services/conversations/webhook/delivery"
)

// resolver is a DNS the test controls: each name resolves to the
// addresses given, and a name may answer differently on each lookup (DNS
// rebinding).
type resolver struct {
	answers map[string][][]netip.Addr
	lookups atomic.Int32
}

func (r *resolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	n := int(r.lookups.Add(1)) - 1
	list, ok := r.answers[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	return list[min(n, len(list)-1)], nil
}

// receiver is a real HTTP server on addr counting what reaches it.
func receiver(t *testing.T, addr string, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	var hits atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		h(w, r)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, &hits
}

func attempt(url string) webhook.Attempt {
	return webhook.Attempt{
		URL:      url,
		Secrets:  []string{webhook.NewSecret()},
		Delivery: webhook.Delivery{EventID: "evt_1", Payload: []byte(`{"type":"webhook.test"}`)},
	}
}

// TestRefusedRanges: every range the API refuses, literal or behind
// a name, is refused when dialling with a clear error and nothing sent;
// the receivers on loopback (127.0.0.1 and ::1) see no request.
func TestRefusedRanges(t *testing.T) {
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) }
	v4, v4hits := receiver(t, "127.0.0.1:0", ok)
	port := v4.Listener.Addr().(*net.TCPAddr).Port
	v6hits := &atomic.Int32{}
	if _, hits := receiverIfIPv6(t, port, ok); hits != nil {
		v6hits = hits
	}
	res := &resolver{answers: map[string][][]netip.Addr{
		"private.example":  {{netip.MustParseAddr("10.1.2.3")}},
		"loopback.example": {{netip.MustParseAddr("127.0.0.1")}},
		// Public on the first lookup, loopback on the second: each dial
		// is checked on what it connects to.
		"rebind.example": {{netip.MustParseAddr("93.184.215.14")}, {netip.MustParseAddr("127.0.0.1")}},
	}}
	sender := delivery.NewSender(delivery.NewDialer(nil, res), 5*time.Second, 0)
	ps := func(s string) string { return s + ":" + strconv.Itoa(port) }
	for _, host := range []string{
		"127.0.0.1", "[::1]", "10.0.0.1", "172.16.0.1", "172.31.255.254", "192.168.1.1",
		"169.254.169.254", "[fd00:ec2::254]", "100.64.0.1", "[::ffff:127.0.0.1]",
		"[64:ff9b::7f00:1]", "[2002:7f00:1::]", "0.0.0.0", "198.18.0.1", "240.0.0.1",
		"224.0.0.1", "[fc00::1]", "[fe80::1]", "[fec0::1]", "[2001::1]", "[64:ff9b:1::1]", "[::127.0.0.1]",
		"private.example", "loopback.example",
	} {
		r := sender.Send(context.Background(), attempt("http://"+ps(host)+"/hook"))
		if r.Status != 0 || !strings.HasPrefix(r.Error, "refused: ") || !strings.Contains(r.Error, "not a globally reachable address") {
			t.Errorf("%s: status %d, error %q; want refused", host, r.Status, r.Error)
		}
	}
	// The rebinding name: the first lookup answers a public address (a
	// dial there is not this test's business: a context ends it at
	// once), the second loopback, which is refused.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sender.Send(ctx, attempt("http://"+ps("rebind.example")+"/hook"))
	if r := sender.Send(context.Background(), attempt("http://"+ps("rebind.example")+"/hook")); !strings.Contains(r.Error, "rebind.example resolves to 127.0.0.1") {
		t.Errorf("rebound name: %q", r.Error)
	}
	if v4hits.Load() != 0 || v6hits.Load() != 0 {
		t.Fatalf("refused addresses received %d + %d requests", v4hits.Load(), v6hits.Load())
	}

	// An allowed range is dialled; the same address outside it is not.
	allowed, err := delivery.ParseAllowedCIDRs([]string{"127.0.0.1/32"})
	if err != nil {
		t.Fatal(err)
	}
	open := delivery.NewSender(delivery.NewDialer(allowed, res), 5*time.Second, 0)
	if r := open.Send(context.Background(), attempt("http://"+ps("loopback.example")+"/hook")); r.Status != 200 || r.Error != "" {
		t.Fatalf("allowed range: %d %q", r.Status, r.Error)
	}
	if r := open.Send(context.Background(), attempt("http://"+ps("[::ffff:127.0.0.2]")+"/hook")); r.Status != 0 {
		t.Fatalf("outside the allowed range: %d %q", r.Status, r.Error)
	}
	if _, err := delivery.ParseAllowedCIDRs([]string{"127.0.0.1"}); err == nil {
		t.Fatal("an address without a prefix length was accepted as a CIDR")
	}
}

// TestRedirectIsAFailure: a 302 to an allowed address is a failed
// attempt; the target is never requested. No proxy of the environment is
// used, and at most 64 KiB of a body are read.
func TestRedirectIsAFailure(t *testing.T) {
	t.Setenv("HTTP_PROXY", "http://127.0.0.1:1")
	var targetHits atomic.Int32
	var srv *httptest.Server
	srv, _ = receiver(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/target":
			targetHits.Add(1)
			w.WriteHeader(200)
		case "/big":
			w.WriteHeader(200)
			chunk := []byte(strings.Repeat("x", 1<<10))
			for range 1 << 10 { // 1 MiB, of which 64 KiB are read
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		case "/busy":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(503)
		default:
			http.Redirect(w, r, srv.URL+"/target", http.StatusFound)
		}
	})
	allowed, _ := delivery.ParseAllowedCIDRs([]string{"127.0.0.0/8"})
	sender := delivery.NewSender(delivery.NewDialer(allowed, nil), 5*time.Second, 0)
	r := sender.Send(context.Background(), attempt(srv.URL+"/hook"))
	if r.Status != 302 || r.Succeeded() || !strings.Contains(r.Error, "redirect") || targetHits.Load() != 0 {
		t.Fatalf("redirect: %d %q, target hit %d times", r.Status, r.Error, targetHits.Load())
	}
	if r := sender.Send(context.Background(), attempt(srv.URL+"/big")); !r.Succeeded() {
		t.Fatalf("large body: %d %q", r.Status, r.Error)
	}
	if r := sender.Send(context.Background(), attempt(srv.URL+"/busy")); r.Status != 503 || r.RetryAfter != 120*time.Second {
		t.Fatalf("Retry-After: %d %v", r.Status, r.RetryAfter)
	}
}

func receiverIfIPv6(t *testing.T, port int, h http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "[::1]:"+strconv.Itoa(port))
	if err != nil {
		return nil, nil // no IPv6 loopback on this machine: the refusal is still checked
	}
	ln.Close()
	return receiver(t, "[::1]:"+strconv.Itoa(port), h)
}
