package main

import (
	"context"
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

	start := time.Now()
	n, elapsed, err := load.run(context.Background(), 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	// wrk runs for whole seconds unless stopped: the run ends near 50 ms.
	if n == 0 || n > answered.Load() || elapsed <= 0 || elapsed >= time.Second || time.Since(start) >= time.Second {
		t.Errorf("run: %d requests in %s (wall %s), the server answered %d", n, elapsed, time.Since(start), answered.Load())
	}
	if wrong.Load() != 0 {
		t.Errorf("%d requests differed from the one given", wrong.Load())
	}
	// A run shorter than wrk takes to start must not stop it before it
	// can report (SIGINT kills wrk until its handler is in place).
	if _, _, err := load.run(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a 1 ms run: %v", err)
	}

	fail.Store(true)
	if _, _, err := load.run(context.Background(), 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "other than 2xx") {
		t.Errorf("run against 500s: err = %v, want the non-2xx answers named", err)
	}
}
