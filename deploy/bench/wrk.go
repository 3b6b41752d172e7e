package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// wrkInstallHint says what to install when wrk is missing.
const wrkInstallHint = "the client-credentials measure drives the service with wrk: install it (Debian or Ubuntu: apt-get install wrk)"

// lookWrk finds the wrk binary, or says how to install it.
func lookWrk() (string, error) {
	path, err := exec.LookPath("wrk")
	if err != nil {
		return "", fmt.Errorf("%s: %w", wrkInstallHint, err)
	}
	return path, nil
}

// wrkLoad sends one HTTP request over and over on keep-alive connections
// with wrk (github.com/wg/wrk), a load generator written in C on epoll.
//
// It drives the HTTP sides whose operation costs about as much as sending
// it: a client-credentials token is one signature, 1.5 ms of CPU, and the
// load generator runs on the same two cores as the service it measures.
// Go's net/http client cost 0.2 ms of CPU per request there (a leaner Go
// transport, on the calling goroutine, no less), most of it the runtime's
// wake-ups and the system calls of its connection goroutines; wrk, one
// thread writing and reading every connection from one epoll loop, leaves
// that CPU to the service. The other HTTP rows cost the store 3 to 80 ms
// per operation and keep the Go client, whose per-worker identities they
// need.
type wrkLoad struct {
	bin         string
	url         string
	script      string // Lua: the method, body and headers of the request
	connections int
}

// newWrkLoad writes req (method, URL, headers, body) into a wrk script in
// dir, for wrk to send on that many keep-alive connections.
func newWrkLoad(bin, dir string, req *http.Request, connections int) (wrkLoad, error) {
	var body []byte
	if req.GetBody != nil {
		r, err := req.GetBody()
		if err != nil {
			return wrkLoad{}, err
		}
		if body, err = io.ReadAll(r); err != nil {
			return wrkLoad{}, err
		}
	}
	var script strings.Builder
	fmt.Fprintf(&script, "wrk.method = %s\nwrk.body = %s\n", luaString(req.Method), luaString(string(body)))
	for _, name := range slices.Sorted(maps.Keys(req.Header)) {
		fmt.Fprintf(&script, "wrk.headers[%s] = %s\n", luaString(name), luaString(req.Header.Get(name)))
	}
	path := filepath.Join(dir, "request.lua")
	if err := os.WriteFile(path, []byte(script.String()), 0o600); err != nil {
		return wrkLoad{}, fmt.Errorf("write the wrk script: %w", err)
	}
	return wrkLoad{bin: bin, url: req.URL.String(), script: path, connections: connections}, nil
}

// luaString quotes an ASCII string as a Lua literal: Go's escapes of
// quotes, backslashes and control characters are Lua's too.
func luaString(s string) string { return strconv.QuoteToASCII(s) }

var (
	wrkDone      = regexp.MustCompile(`(?m)^\s*(\d+) requests in ([0-9.]+[a-z]+),`)
	wrkNon2xx    = regexp.MustCompile(`(?m)^\s*Non-2xx or 3xx responses: (\d+)`)
	wrkSockError = regexp.MustCompile(`(?m)^\s*Socket errors: .*`)
)

// awaitInterruptHandler waits until process pid catches SIGINT, as its
// SigCgt mask in /proc/<pid>/status tells (the harness reads CPU times
// from /proc too: it runs on Linux), or until ctx ends: a loaded machine
// may take long to start wrk.
func awaitInterruptHandler(ctx context.Context, pid int) error {
	status := fmt.Sprintf("/proc/%d/status", pid)
	for ; ; time.Sleep(time.Millisecond) {
		text, err := os.ReadFile(status)
		if err != nil {
			return fmt.Errorf("read %s: %w", status, err)
		}
		for line := range strings.Lines(string(text)) {
			if v, ok := strings.CutPrefix(line, "SigCgt:"); ok {
				mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
				if err != nil {
					return fmt.Errorf("%s: SigCgt %q: %w", status, v, err)
				}
				if mask&(1<<(uint(syscall.SIGINT)-1)) != 0 {
					return nil
				}
			}
		}
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("no SIGINT handler yet: %w", err)
		}
	}
}

// run sends requests for d and returns how many were answered and over how
// long, by wrk's own clock. wrk's durations are whole seconds, so it is
// started for longer and stopped with SIGINT, on which it prints its
// results as at the end of a run. A non-2xx answer or a socket error fails
// the run: a rate of failures would measure the error path.
func (w wrkLoad) run(ctx context.Context, d time.Duration) (int64, time.Duration, error) {
	seconds := int(d/time.Second) + 2
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, w.bin, "-t1", "-c"+strconv.Itoa(w.connections), "-d"+strconv.Itoa(seconds)+"s",
		"-s", w.script, w.url)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return 0, 0, fmt.Errorf("start wrk: %w", err)
	}
	// Until wrk has installed its handler, SIGINT would kill it silently.
	if err := awaitInterruptHandler(ctx, cmd.Process.Pid); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, 0, fmt.Errorf("wrk: %w\n%s", err, out.String())
	}
	timer := time.AfterFunc(d, func() { _ = cmd.Process.Signal(os.Interrupt) })
	defer timer.Stop()
	if err := cmd.Wait(); err != nil {
		return 0, 0, fmt.Errorf("wrk: %w\n%s", err, out.String())
	}
	text := out.String()
	if m := wrkNon2xx.FindStringSubmatch(text); m != nil {
		return 0, 0, fmt.Errorf("wrk got %s answers other than 2xx from %s:\n%s", m[1], w.url, text)
	}
	if m := wrkSockError.FindString(text); m != "" {
		return 0, 0, fmt.Errorf("wrk: %s:\n%s", strings.TrimSpace(m), text)
	}
	m := wrkDone.FindStringSubmatch(text)
	if m == nil {
		return 0, 0, errors.New("wrk printed no request count:\n" + text)
	}
	n, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("wrk's request count %q: %w", m[1], err)
	}
	elapsed, err := time.ParseDuration(m[2])
	if err != nil {
		return 0, 0, fmt.Errorf("wrk's duration %q: %w", m[2], err)
	}
	return n, elapsed, nil
}
