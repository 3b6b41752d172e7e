package e2e

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/deploy/internal/svcproc"
)

// Rotation timings of TestKeyRotationUnderLoad: a key signs for 8 s and is
// published 6 s before it signs. The conversations service refreshes its
// JWKS every second (jwx schedules in whole seconds plus one, so every
// 2 s at worst) and the account replicas reload every 250 ms, so a second
// or two would do on an idle machine; the rest is for a loaded one. Every
// test binary of make test shares one embedded store, which runs one
// command at a time: with two make tests side by side, a replica's reload
// waited in its queue long enough that a key published 3 s ahead was not
// yet in its JWKS when the other replica signed with it.
const (
	rotPeriod       = 8 * time.Second
	rotPublishAhead = 6 * time.Second
	rotLoad         = 2 * rotPeriod
	// rotPace is the least time between two rounds (a login and two
	// verified calls) of one user: about 7 rounds a second per user keep
	// tokens minted and verified around every key change (each key signs
	// for some 60 rounds), without a busy loop taking both cores from the
	// rest of make test for 15 s (a login costs about 10 ms of CPU).
	rotPace = 150 * time.Millisecond
)

// rotRecorder collects what the load loop saw: failed requests, and when
// each kid was first seen in a token and in each replica's JWKS.
type rotRecorder struct {
	mu         sync.Mutex
	requests   int
	failures   []string
	firstToken map[string]time.Time            // kid -> first id token signed with it
	firstJWKS  map[string]map[string]time.Time // replica -> kid -> first seen
	initial    map[string]bool                 // kids in a JWKS before the loop
}

func (r *rotRecorder) fail(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failures = append(r.failures, time.Now().Format("15:04:05.000")+" "+fmt.Sprintf(format, args...))
}

// seen says when a kid was first seen in a token and in each replica's
// JWKS, in seconds before now.
func (r *rotRecorder) seen(kid string, replicas []string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	ago := func(at time.Time, ok bool) string {
		if !ok {
			return "not yet"
		}
		return fmt.Sprintf("%.1fs ago", time.Since(at).Seconds())
	}
	first, ok := r.firstToken[kid]
	out := "first token " + ago(first, ok)
	for i, replica := range replicas {
		at, ok := r.firstJWKS[replica][kid]
		out += fmt.Sprintf(", in replica %d's JWKS %s", i+1, ago(at, ok))
	}
	return out
}

func (r *rotRecorder) count() {
	r.mu.Lock()
	r.requests++
	r.mu.Unlock()
}

// rotDo sends one request and returns the status and body; a transport
// error is status 0.
func rotDo(c *http.Client, method, url, bearer, body string) (int, []byte) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return 0, []byte(err.Error())
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, []byte(err.Error())
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// rotKid returns the kid of a JWT's header.
func rotKid(jwt string) string {
	header, _, _ := strings.Cut(jwt, ".")
	raw, err := base64.RawURLEncoding.DecodeString(header)
	if err != nil {
		return ""
	}
	var h struct{ Kid string }
	_ = json.Unmarshal(raw, &h)
	return h.Kid
}

// nearDeadline reports whether the test's own deadline (its -timeout) is
// less than margin away: the only bound of a wait on the services.
func nearDeadline(t *testing.T, margin time.Duration) bool {
	d, ok := t.Deadline()
	return ok && time.Until(d) < margin
}

// rotJWKS returns the kids a replica publishes, sorted.
func rotJWKS(c *http.Client, base string) ([]string, error) {
	status, body := rotDo(c, "GET", base+"/.well-known/jwks.json", "", "")
	if status != http.StatusOK {
		return nil, fmt.Errorf("JWKS of %s: %d %s", base, status, body)
	}
	var set struct{ Keys []struct{ Kid string } }
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("JWKS of %s: %v", base, err)
	}
	var kids []string
	for _, k := range set.Keys {
		kids = append(kids, k.Kid)
	}
	slices.Sort(kids)
	return kids, nil
}

// TestKeyRotationUnderLoad: two account replicas on one database rotate
// their generated keys every few seconds while clients log in on both
// alternately, list conversations with the id token (the conversations
// service fetches the JWKS of replica 1) and read definitions on the other
// replica with the access token. Not one request may fail; every new key
// be published by the replica that adds it before it signs, and be in both
// replicas' JWKS; the replicas must agree on every key (each added once)
// and end with the same JWKS.
func TestKeyRotationUnderLoad(t *testing.T) {
	t.Parallel()
	began := time.Now()
	s := newStack(t,
		"ACCOUNT_KEY_ROTATION_PERIOD="+rotPeriod.String(),
		"ACCOUNT_KEY_PUBLISH_AHEAD="+rotPublishAhead.String(),
		"ACCOUNT_KEY_CHECK_INTERVAL=250ms",
	)
	s.convEnv = append(s.convEnv, // later entries win
		"CONVERSATIONS_JWKS_REFRESH_INTERVAL=1s",
		"CONVERSATIONS_JWKS_MIN_REFRESH_INTERVAL=1s",
	)
	replica1 := s.startAccount(t)
	addr2, ops2 := svcproc.FreeAddrForTest(t), svcproc.FreeAddrForTest(t)
	replica2 := start(t, filepath.Join(s.bin, "account"),
		append(append([]string{}, s.accountEnv...), "ACCOUNT_HTTP_ADDR="+addr2, "ACCOUNT_OPS_ADDR="+ops2), ops2)
	conv := s.startConversations(t)
	replicas := []string{s.accountURL, "http://" + addr2}
	// No timeout of its own: on a loaded machine a login can take any
	// time; a hang is bounded by the test's -timeout.
	httpc := &http.Client{}

	rec := &rotRecorder{
		firstToken: map[string]time.Time{},
		firstJWKS:  map[string]map[string]time.Time{replicas[0]: {}, replicas[1]: {}},
		initial:    map[string]bool{},
	}
	for _, r := range replicas {
		kids, err := rotJWKS(httpc, r)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			rec.initial[k] = true
		}
	}

	login := func(replica int, user string) (idToken, accessToken string, ok bool) {
		rec.count()
		status, body := rotDo(httpc, "POST", replicas[replica]+"/login", "",
			fmt.Sprintf(`{"username":%q,"password":%q,"accountName":"acme"}`, user, userPassword(user)))
		var out struct {
			Tokens struct {
				IDToken     string `json:"id_token"`
				AccessToken string `json:"access_token"`
			}
		}
		if status != http.StatusOK || json.Unmarshal(body, &out) != nil || out.Tokens.IDToken == "" {
			rec.fail("login %s on replica %d: %d %s", user, replica+1, status, body)
			return "", "", false
		}
		return out.Tokens.IDToken, out.Tokens.AccessToken, true
	}
	oldIDToken, oldAccessToken, ok := login(0, "alice")
	if !ok {
		t.Fatalf("first login failed: %v", rec.failures)
	}

	done := make(chan struct{})
	var wg sync.WaitGroup
	// Watch both JWKS, to see when each key is published.
	wg.Go(func() {
		for {
			for _, r := range replicas {
				kids, err := rotJWKS(httpc, r)
				seen := time.Now()
				if err != nil {
					rec.fail("%v", err)
					continue
				}
				rec.mu.Lock()
				for _, k := range kids {
					if _, ok := rec.firstJWKS[r][k]; !ok {
						rec.firstJWKS[r][k] = seen
					}
				}
				rec.mu.Unlock()
			}
			select {
			case <-done:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	// Two users, each logging in on the replicas alternately, a round
	// every rotPace at most.
	for _, user := range []string{"alice", "bob"} {
		wg.Go(func() {
			pace := time.NewTicker(rotPace)
			defer pace.Stop()
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				case <-pace.C:
				}
				replica := i % 2
				idToken, accessToken, ok := login(replica, user)
				if !ok {
					continue
				}
				kid := rotKid(idToken)
				signed := time.Now()
				rec.mu.Lock()
				if _, ok := rec.firstToken[kid]; !ok {
					rec.firstToken[kid] = signed
				}
				rec.mu.Unlock()

				rec.count()
				if status, body := rotDo(httpc, "GET", s.convURL+"/v1/conversations", idToken, ""); status != http.StatusOK {
					rec.fail("list conversations as %s with a token of kid %s from replica %d: %d %s (%s)", user, kid, replica+1, status, body, rec.seen(kid, replicas))
				}
				rec.count()
				other := replicas[1-replica]
				if status, body := rotDo(httpc, "GET", other+"/definitions", accessToken, ""); status != http.StatusOK {
					rec.fail("definitions on replica %d with an access token of kid %s from replica %d: %d %s", 2-replica, kid, replica+1, status, body)
				}
			}
		})
	}
	// The load runs for rotLoad and then until tokens have been signed by
	// three keys (two rotations), however slowly a loaded machine lets the
	// logins through: the event is awaited, not a time (bounded only by
	// the test's own deadline).
	enough := func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return len(rec.firstToken) >= 3
	}
	time.Sleep(rotLoad)
	for !enough() && !nearDeadline(t, time.Minute) {
		time.Sleep(100 * time.Millisecond)
	}
	close(done)
	wg.Wait()

	// The tokens of the first login, signed by a key retired since, are
	// still accepted everywhere: retired keys stay published.
	for _, check := range []struct{ url, bearer string }{
		{s.convURL + "/v1/conversations", oldIDToken},
		{replicas[0] + "/definitions", oldAccessToken},
		{replicas[1] + "/definitions", oldAccessToken},
	} {
		rec.count()
		if status, body := rotDo(httpc, "GET", check.url, check.bearer, ""); status != http.StatusOK {
			rec.fail("token of the first key (%s) at %s: %d %s", rotKid(check.bearer), check.url, status, body)
		}
	}

	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.failures) > 0 {
		t.Errorf("%d of %d requests failed:\n%s", len(rec.failures), rec.requests, strings.Join(rec.failures[:min(len(rec.failures), 20)], "\n"))
	}
	if len(rec.firstToken) < 3 {
		t.Errorf("id tokens were signed by %d keys in %v, want at least 3 (2 rotations)", len(rec.firstToken), rotLoad)
	}
	// Both replicas end with the same JWKS (allowing one reload for a key
	// added in the last instant).
	var jwks [2][]string
	for {
		for i, r := range replicas {
			kids, err := rotJWKS(httpc, r)
			if err != nil {
				t.Fatal(err)
			}
			jwks[i] = kids
		}
		if slices.Equal(jwks[0], jwks[1]) {
			break
		}
		// A replica reloads within its check interval, or as soon as a
		// loaded machine lets it: only the test's deadline bounds the wait.
		if nearDeadline(t, 30*time.Second) {
			t.Fatalf("the replicas publish different keys: %v and %v", jwks[0], jwks[1])
		}
		time.Sleep(100 * time.Millisecond)
	}

	// Every key that signed during the load is in both replicas' JWKS.
	for kid := range rec.firstToken {
		for i, r := range replicas {
			if !slices.Contains(jwks[i], kid) {
				t.Errorf("kid %s signed tokens but is not in the JWKS of %s: %v", kid, r, jwks[i])
			}
		}
	}

	conv.stop(t)
	replica1.stop(t)
	replica2.stop(t)

	// Each key was added by exactly one replica, once: replicas that were
	// due at the same moment agreed on one successor. And each key was
	// published before it signed: the replica that added it logged a
	// keyring that published it before one that signs with it. That is the
	// order of the replica's own log lines, which no slowness of the
	// machine (or of the test's JWKS polls) can reorder; the publish-ahead
	// margin itself shows in no request failing above.
	added := map[string]int{}
	for i, p := range []*process{replica1, replica2} {
		addedHere := map[string]bool{}
		publishedAhead := map[string]bool{}
		sc := bufio.NewScanner(bytes.NewReader(p.Logs.Bytes()))
		sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for sc.Scan() {
			var line struct {
				Msg, Kid, Level string
				ActiveKid       string   `json:"active_kid"`
				PublishedKids   []string `json:"published_kids"`
			}
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				continue
			}
			switch {
			case line.Msg == "signing keys in use":
				for _, k := range line.PublishedKids {
					if k != line.ActiveKid {
						publishedAhead[k] = true
					}
				}
				if addedHere[line.ActiveKid] && !publishedAhead[line.ActiveKid] && !rec.initial[line.ActiveKid] {
					t.Errorf("replica %d signs with kid %s, which it added, without having published it first", i+1, line.ActiveKid)
				}
			case line.Msg == "next signing key added" || line.Msg == "first signing key created":
				addedHere[line.Kid] = true
				added[line.Kid]++
			case strings.HasPrefix(line.Msg, "signing keys not reloaded"):
				t.Errorf("replica %d logged: %s", i+1, sc.Text())
			}
		}
	}
	for kid, n := range added {
		if n != 1 {
			t.Errorf("key %s was added %d times", kid, n)
		}
	}
	for kid := range rec.firstToken {
		if added[kid] != 1 {
			t.Errorf("kid %s signed tokens but its creation was logged %d times", kid, added[kid])
		}
	}
	t.Logf("%d requests, %d failed; %d keys created, %d signed tokens; JWKS at the end %v; took %v",
		rec.requests, len(rec.failures), len(added), len(rec.firstToken), jwks[0], time.Since(began).Round(time.Millisecond))
}
