package e2e

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/deploy/internal/svcproc"
)

// Webhooks against the real binaries: deliveries to real HTTP
// receivers on loopback, with the retry schedule scaled down by
// configuration. The receivers listen on 127.0.0.2, the one range the
// services allow (CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS), so 127.0.0.1 and
// every other special-purpose address stay refused.

// webhookSchedule is the scaled-down retry schedule of these tests.
var webhookSchedule = []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond}

// webhookEnv configures a conversations replica for these tests.
func webhookEnv(key string) []string {
	var sched []string
	for _, d := range webhookSchedule {
		sched = append(sched, d.String())
	}
	return []string{
		"CONVERSATIONS_WEBHOOK_SECRET_KEY=" + key,
		"CONVERSATIONS_WEBHOOK_ALLOW_HTTP=true",
		"CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS=127.0.0.2/32",
		"CONVERSATIONS_WEBHOOK_RETRY_SCHEDULE=" + strings.Join(sched, ","),
		"CONVERSATIONS_WEBHOOK_POLL_INTERVAL=100ms",
		// An attempt waits at most 5 s; a killed replica's claim falls
		// due 6 s after it was made.
		"CONVERSATIONS_WEBHOOK_TIMEOUT=5s",
		"CONVERSATIONS_WEBHOOK_LEASE=6s",
		"CONVERSATIONS_WEBHOOK_PER_ENDPOINT=2",
		"CONVERSATIONS_WEBHOOK_MANUAL_PER_MINUTE=1000",
	}
}

// hookRequest is one request a receiver got.
type hookRequest struct {
	at        time.Time
	id, ts    string
	signature string
	body      []byte
	header    http.Header
}

// hookReceiver is a real HTTP server on 127.0.0.2 that records every
// request and answers with respond (200 when nil).
type hookReceiver struct {
	*httptest.Server
	mu       sync.Mutex
	requests []hookRequest
	open     int // requests being answered
	maxOpen  int
	respond  func(n int, w http.ResponseWriter) // n: the request's index
	// abandon: a request whose client went away stops counting as open
	// at once, whatever respond still does.
	abandon bool
}

func newHookReceiver(t *testing.T, host string, respond func(n int, w http.ResponseWriter)) *hookReceiver {
	t.Helper()
	ln, err := net.Listen("tcp", host+":0")
	if err != nil {
		t.Fatalf("listen on %s: %v", host, err)
	}
	r := &hookReceiver{respond: respond}
	r.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		n := len(r.requests)
		r.requests = append(r.requests, hookRequest{at: time.Now(), id: req.Header.Get("webhook-id"),
			ts: req.Header.Get("webhook-timestamp"), signature: req.Header.Get("webhook-signature"), body: body, header: req.Header.Clone()})
		r.open++
		r.maxOpen = max(r.maxOpen, r.open)
		abandon := r.abandon
		r.mu.Unlock()
		var once sync.Once
		closeOpen := func() { once.Do(func() { r.mu.Lock(); r.open--; r.mu.Unlock() }) }
		defer closeOpen()
		if abandon {
			go func() { <-req.Context().Done(); closeOpen() }()
		}
		if r.respond == nil {
			w.WriteHeader(200)
			return
		}
		r.respond(n, w)
	}))
	r.Server.Listener.Close()
	r.Server.Listener = ln
	r.Start()
	t.Cleanup(r.Close)
	return r
}

func (r *hookReceiver) got() []hookRequest {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// hooksAPI calls the webhook endpoints with a service client's token.
type hooksAPI struct {
	t      *testing.T
	base   string
	bearer string
}

func (h hooksAPI) do(method, path, body string, into any) int {
	h.t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, h.base+path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
		if method == "PATCH" {
			req.Header.Set("Content-Type", "application/merge-patch+json")
		}
	}
	req.Header.Set("Authorization", "Bearer "+h.bearer)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if into != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, into); err != nil {
			h.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	if resp.StatusCode >= 300 {
		h.t.Logf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	return resp.StatusCode
}

// The endpoint and delivery as the API answers them: the Go client's wire
// types, the one definition on the callers' side.
type (
	hookEndpoint = client.Webhook
	hookDelivery = client.WebhookDelivery
)

func (h hooksAPI) create(url string) hookEndpoint {
	h.t.Helper()
	var e hookEndpoint
	if s := h.do("POST", "/v1/webhooks", fmt.Sprintf(`{"url":%q}`, url), &e); s != 201 {
		h.t.Fatalf("create endpoint %s: %d", url, s)
	}
	return e
}

func (h hooksAPI) test(endpointID string) hookDelivery {
	h.t.Helper()
	var d hookDelivery
	if s := h.do("POST", "/v1/webhooks/"+endpointID+"/test", "", &d); s != 202 {
		h.t.Fatalf("test %s: %d", endpointID, s)
	}
	return d
}

func (h hooksAPI) deliveries(endpointID string) []hookDelivery {
	h.t.Helper()
	var list []hookDelivery
	if s := h.do("GET", "/v1/webhooks/"+endpointID+"/deliveries?limit=100", "", &list); s != 200 {
		h.t.Fatalf("deliveries of %s: %d", endpointID, s)
	}
	return list
}

// waitDelivery waits until the delivery of endpointID with id satisfies done.
func (h hooksAPI) waitDelivery(endpointID, id string, done func(hookDelivery) bool, what string) hookDelivery {
	h.t.Helper()
	var found hookDelivery
	waitFor(h.t, func() bool {
		for _, d := range h.deliveries(endpointID) {
			if d.ID == id && done(d) {
				found = d
				return true
			}
		}
		return false
	}, what)
	return found
}

var (
	clientIDLine     = regexp.MustCompile(`(?m)^client_id: (\S+)$`)
	clientSecretLine = regexp.MustCompile(`(?m)^client_secret: (\S+)$`)
)

// clientToken creates a service client of acme with scopes and returns
// an access token of it.
func (s *stack) clientToken(t *testing.T, scopes string) string {
	t.Helper()
	cmd := exec.Command(filepath.Join(s.bin, "account"), "create-client", "--account", "acme", "--name", "hooks", "--scopes", scopes)
	cmd.Env = append(os.Environ(), s.accountEnv...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("create-client: %v\n%s", err, out)
	}
	id, secret := clientIDLine.FindSubmatch(out), clientSecretLine.FindSubmatch(out)
	if id == nil || secret == nil {
		t.Fatalf("create-client printed no credentials")
	}
	form := url.Values{"grant_type": {"client_credentials"}, "client_id": {string(id[1])}, "client_secret": {string(secret[1])}}
	resp, err := http.PostForm(s.accountURL+"/oauth2/token", form)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var tok struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&tok); err != nil || tok.AccessToken == "" {
		t.Fatalf("client token: %d %v", resp.StatusCode, err)
	}
	return tok.AccessToken
}

// verifyEach checks that every signature of r verifies with the official
// Standard Webhooks library under one of secrets, and returns how many
// signatures r carries.
func verifyEach(t *testing.T, r hookRequest, secrets ...string) int {
	t.Helper()
	sigs := strings.Fields(r.signature)
	for i, sig := range sigs {
		ok := false
		for _, secret := range secrets {
			wh, err := standardwebhooks.NewWebhook(secret)
			if err != nil {
				t.Fatal(err)
			}
			h := r.header.Clone()
			h.Set("webhook-signature", sig)
			if wh.Verify(r.body, h) == nil {
				ok = true
			}
		}
		if !ok {
			t.Fatalf("signature %d of %d (%s) verifies under none of the secrets", i+1, len(sigs), r.id)
		}
	}
	return len(sigs)
}

func TestWebhooks(t *testing.T) {
	s := newStack(t)
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	s.convEnv = append(s.convEnv, webhookEnv(base64.StdEncoding.EncodeToString(key))...)
	s.startAccount(t)
	replicaA := s.startConversations(t)
	h := hooksAPI{t: t, base: s.convURL, bearer: s.clientToken(t, "webhooks:manage,conversations:read,conversations:write")}

	t.Run("RetriesAtTheScheduledDelaysWithOneWebhookID", func(t *testing.T) {
		h.t = t
		// 503 with Retry-After: 1, then 500, then 200.
		rcv := newHookReceiver(t, "127.0.0.2", func(n int, w http.ResponseWriter) {
			switch n {
			case 0:
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(503)
			case 1:
				w.WriteHeader(500)
			default:
				w.WriteHeader(204)
			}
		})
		e := h.create(rcv.URL + "/hook")
		d := h.test(e.ID)
		final := h.waitDelivery(e.ID, d.ID, func(d hookDelivery) bool { return d.State != "pending" }, "the delivery to end")
		if final.State != "succeeded" || final.Attempts != 3 || final.ResponseStatus == nil || *final.ResponseStatus != 204 || final.Error != nil {
			t.Fatalf("delivery %+v", final)
		}
		got := rcv.got()
		if len(got) != 3 {
			t.Fatalf("%d requests, want 3", len(got))
		}
		for _, r := range got {
			if r.id != d.EventID || verifyEach(t, r, e.Secret) != 1 {
				t.Fatalf("webhook-id %q, want %q on every attempt", r.id, d.EventID)
			}
		}
		// Retry-After (1 s) postponed the second attempt; the third came
		// after the schedule's second wait, less its jitter.
		if gap := got[1].at.Sub(got[0].at); gap < time.Second {
			t.Errorf("second attempt %v after the first, before Retry-After's 1 s", gap)
		}
		if gap, least := got[2].at.Sub(got[1].at), webhookSchedule[1]*8/10; gap < least {
			t.Errorf("third attempt %v after the second, want at least %v", gap, least)
		}
		// Every attempt is signed at its own time.
		if got[0].ts == got[1].ts {
			t.Errorf("two attempts 1 s apart carry one webhook-timestamp %s", got[0].ts)
		}
		h.do("DELETE", "/v1/webhooks/"+e.ID, "", nil)
	})

	t.Run("LastRetryFailsAnd410Disables", func(t *testing.T) {
		h.t = t
		failing := newHookReceiver(t, "127.0.0.2", func(_ int, w http.ResponseWriter) { w.WriteHeader(500) })
		gone := newHookReceiver(t, "127.0.0.2", func(_ int, w http.ResponseWriter) { w.WriteHeader(410) })
		ef, eg := h.create(failing.URL+"/"), h.create(gone.URL+"/")
		df, dg := h.test(ef.ID), h.test(eg.ID)
		final := h.waitDelivery(ef.ID, df.ID, func(d hookDelivery) bool { return d.State != "pending" }, "the failing delivery to end")
		if final.State != "failed" || final.Attempts != len(webhookSchedule)+1 || len(failing.got()) != len(webhookSchedule)+1 {
			t.Fatalf("failing delivery %+v after %d requests", final, len(failing.got()))
		}
		final = h.waitDelivery(eg.ID, dg.ID, func(d hookDelivery) bool { return d.State != "pending" }, "the 410 delivery to end")
		var after hookEndpoint
		h.do("GET", "/v1/webhooks/"+eg.ID, "", &after)
		if final.State != "failed" || final.Attempts != 1 || after.Enabled || after.DisabledReason == nil || !strings.Contains(*after.DisabledReason, "410") {
			t.Fatalf("410: delivery %+v, endpoint %+v", final, after)
		}
		h.do("DELETE", "/v1/webhooks/"+ef.ID, "", nil)
		h.do("DELETE", "/v1/webhooks/"+eg.ID, "", nil)
	})

	t.Run("RefusedAddressesAndRedirects", func(t *testing.T) {
		h.t = t
		// Receivers on 127.0.0.1 and ::1, which must see nothing.
		local := newHookReceiver(t, "127.0.0.1", nil)
		port := local.Listener.Addr().(*net.TCPAddr).Port
		var local6 *hookReceiver
		if ln, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", port)); err == nil {
			ln.Close()
			local6 = newHookReceiver(t, "[::1]", nil)
		}
		// An address literal the dialler refuses is refused at
		// registration already: no delivery to it could ever happen.
		for _, host := range []string{"127.0.0.1", "[::1]", "10.0.0.1", "172.16.0.1", "192.168.0.1", "169.254.169.254",
			"[fd00:ec2::254]", "100.64.0.1", "[::ffff:127.0.0.1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "0.0.0.0"} {
			url := fmt.Sprintf("http://%s:%d/hook", host, port)
			if s := h.do("POST", "/v1/webhooks", fmt.Sprintf(`{"url":%q}`, url), nil); s != 400 {
				t.Errorf("%s registered: %d, want 400", url, s)
			}
		}
		// A name is judged when dialling: localhost resolves to loopback.
		type pending struct{ endpoint, delivery, host string }
		var all []pending
		for _, host := range []string{"localhost"} {
			e := h.create(fmt.Sprintf("http://%s:%d/hook", host, port))
			all = append(all, pending{e.ID, h.test(e.ID).ID, host})
		}
		for _, p := range all {
			d := h.waitDelivery(p.endpoint, p.delivery, func(d hookDelivery) bool { return d.Attempts >= 1 }, "an attempt to "+p.host)
			if d.ResponseStatus != nil || d.Error == nil || !strings.Contains(*d.Error, "not a globally reachable address") {
				t.Errorf("%s: %+v (error %v)", p.host, d, d.Error)
			}
			h.do("DELETE", "/v1/webhooks/"+p.endpoint, "", nil)
		}
		if n := len(local.got()); n != 0 {
			t.Errorf("127.0.0.1 received %d requests", n)
		}
		if local6 != nil && len(local6.got()) != 0 {
			t.Errorf("::1 received %d requests", len(local6.got()))
		}

		// A 302 to an allowed address is a failure, not followed.
		target := newHookReceiver(t, "127.0.0.2", nil)
		redirecting := newHookReceiver(t, "127.0.0.2", func(_ int, w http.ResponseWriter) {
			w.Header().Set("Location", target.URL+"/elsewhere")
			w.WriteHeader(302)
		})
		e := h.create(redirecting.URL + "/hook")
		d := h.waitDelivery(e.ID, h.test(e.ID).ID, func(d hookDelivery) bool { return d.Attempts >= 1 }, "the redirected attempt")
		if d.ResponseStatus == nil || *d.ResponseStatus != 302 || d.State == "succeeded" || d.Error == nil || !strings.Contains(*d.Error, "redirect") {
			t.Errorf("302: %+v", d)
		}
		if n := len(target.got()); n != 0 {
			t.Errorf("the redirect was followed %d times", n)
		}
		h.do("DELETE", "/v1/webhooks/"+e.ID, "", nil)
	})

	t.Run("RotationSignsWithBothSecretsDuringTheOverlap", func(t *testing.T) {
		h.t = t
		rcv := newHookReceiver(t, "127.0.0.2", nil)
		e := h.create(rcv.URL + "/hook")
		deliver := func() hookRequest {
			d := h.test(e.ID)
			h.waitDelivery(e.ID, d.ID, func(d hookDelivery) bool { return d.State == "succeeded" }, "a delivery")
			got := rcv.got()
			return got[len(got)-1]
		}
		if n := verifyEach(t, deliver(), e.Secret); n != 1 {
			t.Fatalf("%d signatures before a rotation", n)
		}
		var rotated struct{ Secret string }
		if s := h.do("POST", "/v1/webhooks/"+e.ID+"/rotate-secret", `{"overlap":3600}`, &rotated); s != 200 {
			t.Fatalf("rotate: %d", s)
		}
		r := deliver()
		if n := verifyEach(t, r, e.Secret, rotated.Secret); n != 2 {
			t.Fatalf("%d signatures during the overlap, want 2", n)
		}
		// Each of the two verifies alone under its own secret.
		for _, secret := range []string{e.Secret, rotated.Secret} {
			wh, _ := standardwebhooks.NewWebhook(secret)
			if err := wh.Verify(r.body, r.header); err != nil {
				t.Fatalf("the official library refuses the delivery under one secret: %v", err)
			}
		}
		// Rotated again with a 1 s overlap: the first secret stops now,
		// the second after a second; then one signature.
		var again struct{ Secret string }
		h.do("POST", "/v1/webhooks/"+e.ID+"/rotate-secret", `{"overlap":1}`, &again)
		for {
			r := deliver()
			if n := verifyEach(t, r, rotated.Secret, again.Secret); n == 1 {
				verifyEach(t, r, again.Secret)
				break
			}
			if nearDeadline(t, time.Minute) {
				t.Fatal("the overlap never ended")
			}
		}
		h.do("DELETE", "/v1/webhooks/"+e.ID, "", nil)
	})

	t.Run("AnEndpointThatHangsDelaysNoOther", func(t *testing.T) {
		h.t = t
		release := make(chan struct{})
		// It answers when released, or gives up when the service gave up
		// on the request (its timeout): then the receiver's open requests
		// are the service's requests in flight.
		slow := newHookReceiver(t, "127.0.0.2", func(_ int, w http.ResponseWriter) {
			<-release
			w.WriteHeader(200)
		})
		slow.mu.Lock()
		slow.abandon = true
		slow.mu.Unlock()
		t.Cleanup(func() { close(release) }) // before the receiver closes
		var mu sync.Mutex
		var openAtFast []int
		fast := newHookReceiver(t, "127.0.0.2", func(_ int, w http.ResponseWriter) {
			slow.mu.Lock()
			open := slow.open
			slow.mu.Unlock()
			mu.Lock()
			openAtFast = append(openAtFast, open)
			mu.Unlock()
			w.WriteHeader(200)
		})
		es, ef := h.create(slow.URL+"/"), h.create(fast.URL+"/")
		for range 4 {
			h.test(es.ID)
		}
		waitFor(t, func() bool { return len(slow.got()) >= 1 }, "the hanging endpoint's first request")
		var ids []string
		for range 5 {
			ids = append(ids, h.test(ef.ID).ID)
		}
		for _, id := range ids {
			h.waitDelivery(ef.ID, id, func(d hookDelivery) bool { return d.State == "succeeded" }, "the fast endpoint's delivery")
		}
		mu.Lock()
		defer mu.Unlock()
		if !slices.ContainsFunc(openAtFast, func(n int) bool { return n > 0 }) {
			t.Errorf("no fast delivery arrived while the hanging endpoint held a request (%v)", openAtFast)
		}
		slow.mu.Lock()
		if slow.maxOpen > 2 {
			t.Errorf("the hanging endpoint had %d requests in flight, more than CONVERSATIONS_WEBHOOK_PER_ENDPOINT=2", slow.maxOpen)
		}
		slow.mu.Unlock()
		h.do("DELETE", "/v1/webhooks/"+es.ID, "", nil)
		h.do("DELETE", "/v1/webhooks/"+ef.ID, "", nil)
	})

	// Last: it kills replica A. B starts on the same database and takes
	// over A's claims when their lease ends.
	t.Run("KilledReplicaWorkIsTakenOver", func(t *testing.T) {
		h.t = t
		hold := make(chan struct{})
		var holdOnce sync.Once
		rcv := newHookReceiver(t, "127.0.0.2", func(n int, w http.ResponseWriter) {
			select {
			case <-hold: // released: answer
			default:
				if n < 2 {
					<-hold // replica A's first attempts hang until A is dead
				}
			}
			w.WriteHeader(200)
		})
		t.Cleanup(func() { holdOnce.Do(func() { close(hold) }) })
		e := h.create(rcv.URL + "/hook")
		var ids []string
		for range 3 {
			ids = append(ids, h.test(e.ID).ID)
		}
		waitFor(t, func() bool { return len(rcv.got()) >= 2 }, "replica A's attempts")

		bAddr, bOps := svcproc.FreeAddrForTest(t), svcproc.FreeAddrForTest(t)
		env := slices.Clone(s.convEnv)
		for i, kv := range env {
			switch {
			case strings.HasPrefix(kv, "CONVERSATIONS_HTTP_ADDR="):
				env[i] = "CONVERSATIONS_HTTP_ADDR=" + bAddr
			case strings.HasPrefix(kv, "CONVERSATIONS_OPS_ADDR="):
				env[i] = "CONVERSATIONS_OPS_ADDR=" + bOps
			}
		}
		start(t, filepath.Join(s.bin, "conversations"), env, bOps)
		replicaA.Kill()
		holdOnce.Do(func() { close(hold) })

		hb := hooksAPI{t: t, base: "http://" + bAddr, bearer: h.bearer}
		for _, id := range ids {
			hb.waitDelivery(e.ID, id, func(d hookDelivery) bool { return d.State == "succeeded" }, "replica B's delivery")
		}
		var events []string
		for _, d := range hb.deliveries(e.ID) {
			events = append(events, d.EventID)
		}
		seen := map[string]int{}
		for _, r := range rcv.got() {
			var body struct{ ID string }
			json.Unmarshal(r.body, &body)
			if r.id != body.ID || !slices.Contains(events, r.id) {
				t.Errorf("a request with webhook-id %q carries event %q", r.id, body.ID)
			}
			seen[r.id]++
		}
		if len(seen) != 3 {
			t.Fatalf("the receiver saw %d events of 3: %v", len(seen), seen)
		}
	})
}
