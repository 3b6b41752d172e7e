package token_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
)

// jwksServer is a JWKS endpoint whose answer a test can change, and which
// counts the requests it gets.
type jwksServer struct {
	*httptest.Server
	requests atomic.Int64

	mu     sync.Mutex
	status int
	body   []byte
	header http.Header
	gate   chan struct{} // when set, requests wait for it to close
}

func newJWKSServer(t *testing.T, kr *token.Keyring) *jwksServer {
	s := &jwksServer{status: http.StatusOK, body: kr.JWKS(), header: http.Header{}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		gate := s.gate
		s.mu.Unlock()
		if gate != nil {
			<-gate
		}
		s.requests.Add(1)
		s.mu.Lock()
		status, body := s.status, s.body
		for k, v := range s.header {
			w.Header()[k] = v
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *jwksServer) serve(status int, body []byte) {
	s.mu.Lock()
	s.status, s.body = status, body
	s.mu.Unlock()
}

// remoteFixture mints with its own issuer and verifies through a
// RemoteKeySet pointed at a jwksServer.
type remoteFixture struct {
	server   *jwksServer
	remote   *token.RemoteKeySet
	verifier *token.Verifier
	logs     *syncBuffer
}

func newRemote(t *testing.T, server *jwksServer, opts token.RemoteOptions) *remoteFixture {
	t.Helper()
	logs := &syncBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(logs, nil))
	rks, err := token.NewRemoteKeySet(context.Background(), server.URL, opts)
	if err != nil {
		t.Fatalf("NewRemoteKeySet: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := rks.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	v, err := token.NewVerifier(rks, token.VerifierConfig{Issuer: testIssuer, Audience: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	return &remoteFixture{server: server, remote: rks, verifier: v, logs: logs}
}

func (r *remoteFixture) waitReady(t *testing.T) {
	t.Helper()
	eventually(t, 5*time.Second, "first JWKS fetch", func() bool { return r.remote.Ready(context.Background()) })
}

// mintWith mints an access token with a fresh issuer over kr, on the real
// clock (remote verifiers use time.Now).
func mintWith(t *testing.T, kr *token.Keyring) string {
	t.Helper()
	iss, err := token.NewIssuer(token.IssuerConfig{Issuer: testIssuer, Audience: []string{testAudience}, Keys: token.StaticKeyring(kr)})
	if err != nil {
		t.Fatal(err)
	}
	set, err := iss.Mint(context.Background(), testSubject())
	if err != nil {
		t.Fatal(err)
	}
	return set.AccessToken
}

// newKeyring returns a keyring with a new active key that also publishes
// every key of others: an issuer after a rotation.
func newKeyring(t *testing.T, alg string, others ...*token.Keyring) *token.Keyring {
	t.Helper()
	k := testKey(t, alg, others...)
	var published []jwk.Key
	for _, o := range others {
		for i := range o.PublicSet().Len() {
			pk, _ := o.PublicSet().Key(i)
			published = append(published, pk)
		}
	}
	kr, err := token.NewKeyring(k, published...)
	if err != nil {
		t.Fatal(err)
	}
	return kr
}

func TestRemoteKeySetReadyAfterFirstFetch(t *testing.T) {
	t.Parallel()
	kr := newKeyring(t, token.AlgRS256)
	server := newJWKSServer(t, kr)
	gate := make(chan struct{})
	server.mu.Lock()
	server.gate = gate
	server.mu.Unlock()
	r := newRemote(t, server, token.RemoteOptions{})
	raw := mintWith(t, kr)

	if r.remote.Ready(context.Background()) {
		t.Fatal("Ready before the first fetch completed")
	}
	if _, err := r.remote.KeySet(context.Background()); !errors.Is(err, token.ErrKeysUnavailable) {
		t.Errorf("KeySet before first fetch: %v", err)
	}
	if _, err := r.verifier.Verify(context.Background(), raw); !errors.Is(err, token.ErrKeysUnavailable) {
		t.Errorf("Verify before first fetch: %v", err)
	}
	close(gate)
	r.waitReady(t)
	if _, err := r.verifier.Verify(context.Background(), raw); err != nil {
		t.Errorf("Verify after first fetch: %v", err)
	}
}

func TestRemoteKeySetRefetchesOnUnknownKidOncePerMinInterval(t *testing.T) {
	t.Parallel()
	first := newKeyring(t, token.AlgRS256)
	server := newJWKSServer(t, first)
	r := newRemote(t, server, token.RemoteOptions{MinRefreshInterval: time.Minute, RefreshInterval: time.Hour})
	r.waitReady(t)
	if got := server.requests.Load(); got != 1 {
		t.Fatalf("%d requests after the first fetch", got)
	}

	// The issuer starts signing with a new key and publishes it (keeping
	// the old one). A token with the new kid is accepted at once, through
	// one refetch, long before the refresh interval.
	second := newKeyring(t, token.AlgES256, first)
	server.serve(http.StatusOK, second.JWKS())
	if _, err := r.verifier.Verify(context.Background(), mintWith(t, second)); err != nil {
		t.Fatalf("token of the newly published key: %v", err)
	}
	if got := server.requests.Load(); got != 2 {
		t.Errorf("%d requests, want 2 (one refetch)", got)
	}
	if _, err := r.verifier.Verify(context.Background(), mintWith(t, first)); err != nil {
		t.Errorf("token of the old key after the refetch: %v", err)
	}

	// Another unknown kid within MinRefreshInterval: no request.
	third := newKeyring(t, token.AlgEdDSA, second)
	server.serve(http.StatusOK, third.JWKS())
	if _, err := r.verifier.Verify(context.Background(), mintWith(t, third)); !errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("second unknown kid within MinRefreshInterval: %v", err)
	}
	if got := server.requests.Load(); got != 2 {
		t.Errorf("%d requests, want still 2", got)
	}
}

func TestRemoteKeySetUnknownKidDoesNotStampede(t *testing.T) {
	t.Parallel()
	first := newKeyring(t, token.AlgRS256)
	server := newJWKSServer(t, first)
	r := newRemote(t, server, token.RemoteOptions{MinRefreshInterval: time.Minute, RefreshInterval: time.Hour})
	r.waitReady(t)

	second := newKeyring(t, token.AlgES256, first)
	server.serve(http.StatusOK, second.JWKS())
	raw := mintWith(t, second)
	// Hold the refetch until every verifier is waiting on it.
	gate := make(chan struct{})
	server.mu.Lock()
	server.gate = gate
	server.mu.Unlock()

	const n = 50
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := r.verifier.Verify(context.Background(), raw)
			errs <- err
		}()
	}
	time.Sleep(100 * time.Millisecond)
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent verify: %v", err)
		}
	}
	if got := server.requests.Load(); got != 2 {
		t.Errorf("%d requests for %d concurrent unknown-kid tokens, want 2 (first fetch + one refetch)", got, n)
	}
}

func TestRemoteKeySetKeepsLastGoodKeys(t *testing.T) {
	t.Parallel()
	for name, failure := range map[string]struct {
		status int
		body   string
	}{
		"500":            {http.StatusInternalServerError, `{"error":"boom"}`},
		"garbage":        {http.StatusOK, `<html>maintenance</html>`},
		"truncated JSON": {http.StatusOK, `{"keys":[{"kty":"RSA","n":`},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			kr := newKeyring(t, token.AlgRS256)
			server := newJWKSServer(t, kr)
			// No Cache-Control from this server, so the cache refetches
			// every MinRefreshInterval; failures are logged at most once
			// per RefreshInterval.
			r := newRemote(t, server, token.RemoteOptions{MinRefreshInterval: time.Second, RefreshInterval: time.Hour})
			r.waitReady(t)
			raw := mintWith(t, kr)

			server.serve(failure.status, []byte(failure.body))
			// Background refreshes fail...
			eventually(t, 10*time.Second, "two failed background fetches", func() bool { return server.requests.Load() >= 3 })
			// ...and so does a refetch for an unknown kid.
			if _, err := r.verifier.Verify(context.Background(), mintWith(t, newKeyring(t, token.AlgEdDSA))); !errors.Is(err, token.ErrInvalidToken) {
				t.Errorf("unknown kid while the endpoint fails: %v", err)
			}
			if !r.remote.Ready(context.Background()) {
				t.Error("no longer Ready after failures")
			}
			if _, err := r.verifier.Verify(context.Background(), raw); err != nil {
				t.Errorf("token of the last good key set: %v", err)
			}
			eventually(t, 5*time.Second, "a logged failure", func() bool { return strings.Contains(r.logs.String(), "JWKS fetch failed") })
			if n := strings.Count(r.logs.String(), "JWKS fetch failed"); n != 1 {
				t.Errorf("%d log lines for repeated failures within RefreshInterval, want 1:\n%s", n, r.logs.String())
			}
		})
	}
}

// A JWKS that parses but holds no key (a misconfigured deploy, a proxy's
// placeholder) must not make every token unverifiable.
func TestRemoteKeySetIgnoresAnEmptyKeySet(t *testing.T) {
	t.Parallel()
	kr := newKeyring(t, token.AlgRS256)
	server := newJWKSServer(t, kr)
	r := newRemote(t, server, token.RemoteOptions{MinRefreshInterval: time.Second, RefreshInterval: time.Hour})
	r.waitReady(t)
	raw := mintWith(t, kr)

	server.serve(http.StatusOK, []byte(`{"keys":[]}`))
	eventually(t, 10*time.Second, "two fetches of the empty set", func() bool { return server.requests.Load() >= 3 })
	if _, err := r.verifier.Verify(context.Background(), raw); err != nil {
		t.Fatalf("token of the last non-empty key set after an empty one: %v", err)
	}
	if !r.remote.Ready(context.Background()) {
		t.Fatal("not Ready after an empty key set")
	}
}

func TestRemoteKeySetStartsWhileJWKSHostIsDown(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	start := time.Now()
	rks, err := token.NewRemoteKeySet(context.Background(), "http://"+addr+"/.well-known/jwks.json", token.RemoteOptions{Logger: slog.New(slog.NewTextHandler(&syncBuffer{}, nil))})
	if err != nil {
		t.Fatalf("NewRemoteKeySet against a closed port: %v", err)
	}
	defer rks.Close()
	if d := time.Since(start); d > time.Second {
		t.Errorf("NewRemoteKeySet blocked for %s", d)
	}
	if rks.Ready(context.Background()) {
		t.Error("Ready without keys")
	}
	v, err := token.NewVerifier(rks, token.VerifierConfig{Issuer: testIssuer, Audience: []string{testAudience}})
	if err != nil {
		t.Fatal(err)
	}
	ring := newKeyring(t, token.AlgRS256)
	_, err = v.Verify(context.Background(), mintWith(t, ring))
	if !errors.Is(err, token.ErrKeysUnavailable) || errors.Is(err, token.ErrInvalidToken) {
		t.Errorf("Verify = %v, want ErrKeysUnavailable", err)
	}

}

// A service started before its JWKS host must become ready within moments
// of the host answering, not after the cache's 30 s minimum interval.
func TestRemoteKeySetBecomesReadySoonAfterHostRecovers(t *testing.T) {
	t.Parallel()
	ring := newKeyring(t, token.AlgES256)
	var up atomic.Bool
	jwks := jwksHandler(token.StaticKeyring(ring))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !up.Load() {
			http.Error(w, "starting", http.StatusServiceUnavailable)
			return
		}
		jwks.ServeHTTP(w, r)
	}))
	defer srv.Close()
	rks, err := token.NewRemoteKeySet(context.Background(), srv.URL, token.RemoteOptions{Logger: slog.New(slog.NewTextHandler(&syncBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer rks.Close()
	time.Sleep(time.Second) // a few failed fetches
	if rks.Ready(context.Background()) {
		t.Fatal("ready while the host fails")
	}
	up.Store(true)
	eventually(t, 10*time.Second, "readiness after the JWKS host recovered", func() bool { return rks.Ready(context.Background()) })
}

func TestNewRemoteKeySetRejectsBadURL(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "not a url", "ftp://example.com/jwks", "file:///etc/passwd", "http://"} {
		if rks, err := token.NewRemoteKeySet(context.Background(), u, token.RemoteOptions{}); err == nil {
			rks.Close()
			t.Errorf("%q accepted", u)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the cache's goroutines to log to.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
