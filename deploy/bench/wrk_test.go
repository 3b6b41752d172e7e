package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// wrkLoad sends exactly the request it was given, counts what was answered
// within the run, and fails the run on an answer other than 2xx.
func TestWrkLoadSendsTheRequestAndCountsAnswers(t *testing.T) {
	bin, err := lookWrk()
	if err != nil {
		t.Fatal(err)
	}
	var answered, wrong atomic.Int64
	var fail atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		user, pass, _ := r.BasicAuth()
		if r.Method != http.MethodPost || r.URL.Path != "/oauth2/token" || string(body) != "grant_type=client_credentials" ||
			r.Header.Get("Content-Type") != "application/x-www-form-urlencoded" || user != "id" || pass != `se"cret\` {
			wrong.Add(1)
		}
		if fail.Load() {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		answered.Add(1)
		_, _ = io.WriteString(w, `{"access_token":"x"}`)
	}))
	defer srv.Close()

	req, err := http.NewRequest(http.MethodPost, srv.URL+"/oauth2/token", strings.NewReader("grant_type=client_credentials"))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth("id", `se"cret\`)
	load, err := newWrkLoad(bin, t.TempDir(), req, 2)
	if err != nil {
		t.Fatal(err)
	}

	// wrk runs for whole seconds unless stopped; stopped early, it still
	// reports what was answered. How many requests a short run completes
	// depends on the machine's load, so a run that completed none is
	// repeated, longer, until one does: the count is what is checked, not
	// the speed.
	var n int64
	var elapsed time.Duration
	for d := 50 * time.Millisecond; n == 0; d *= 2 {
		if n, elapsed, err = load.run(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	if n > answered.Load() || elapsed <= 0 {
		t.Errorf("run: %d requests in %s, the server answered %d", n, elapsed, answered.Load())
	}
	if wrong.Load() != 0 {
		t.Errorf("%d requests differed from the one given", wrong.Load())
	}
	// A run shorter than wrk takes to start must not stop it before it
	// can report (SIGINT kills wrk until its handler is in place).
	if _, _, err := load.run(t.Context(), time.Millisecond); err != nil {
		t.Errorf("a 1 ms run: %v", err)
	}

	// Against 500s, a run that got any answer fails; one that got none in
	// its time (a loaded machine) is repeated, longer.
	fail.Store(true)
	for d := 100 * time.Millisecond; ; d *= 2 {
		n, _, err := load.run(t.Context(), d)
		if err == nil && n == 0 {
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "other than 2xx") {
			t.Errorf("run against 500s: err = %v, want the non-2xx answers named", err)
		}
		break
	}
}
