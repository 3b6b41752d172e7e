package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func quietLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// buildBinaries builds both services into dir, as "make build" does (and
// as deploy/e2e does, so that the two share compiled packages).
func buildBinaries(ctx context.Context, dir string) error {
	for _, svc := range []string{"account", "conversations"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", filepath.Join(dir, svc),
			"github.com/acme/platform/services/"+svc+"/cmd/"+svc)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build %s: %w\n%s", svc, err, out)
		}
	}
	return nil
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// process is one running service binary.
type process struct {
	name    string
	cmd     *exec.Cmd
	logs    *bytes.Buffer
	done    chan error
	ready   time.Duration // from exec to the first 200 of /readyz
	opsAddr string
}

// startProcess runs bin with env and waits until its /readyz answers 200,
// polling every 2 ms so that the measured start-up is not rounded up much.
func startProcess(ctx context.Context, name, bin string, env []string, opsAddr string) (*process, error) {
	p := &process{name: name, cmd: exec.Command(bin), logs: &bytes.Buffer{}, done: make(chan error, 1), opsAddr: opsAddr}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	started := time.Now()
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	client := &http.Client{Timeout: time.Second}
	deadline := started.Add(30 * time.Second)
	for {
		resp, err := client.Get("http://" + opsAddr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.ready = time.Since(started)
				return p, nil
			}
		}
		select {
		case err := <-p.done:
			return nil, fmt.Errorf("%s exited before ready: %v\n%s", name, err, p.logs)
		case <-ctx.Done():
			p.kill()
			return nil, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.kill()
			return nil, fmt.Errorf("%s not ready after 30s:\n%s", name, p.logs)
		}
	}
}

// stop asks for a graceful stop and waits for it.
func (p *process) stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.done:
		if err != nil {
			return fmt.Errorf("%s: exit after SIGTERM: %w\n%s", p.name, err, p.logs)
		}
		return nil
	case <-time.After(20 * time.Second):
		p.kill()
		return fmt.Errorf("%s: no exit 20s after SIGTERM", p.name)
	}
}

func (p *process) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// peakRSS is the process's resident-set high-water mark (VmHWM), in MiB;
// zero where /proc is not available.
func (p *process) peakRSS() float64 {
	for _, line := range strings.Split(readFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid)), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err == nil {
				return kib / 1024
			}
		}
	}
	return 0
}

// cpuProfile fetches a CPU profile of the running process from its
// operations listener (OPS_PPROF) for d, into path.
func (p *process) cpuProfile(ctx context.Context, d time.Duration, path string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.opsAddr, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s: %w", p.name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s: %s", p.name, resp.Status)
	}
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o644)
}

// runTool runs a subcommand of bin (account provision, …) under env.
func runTool(ctx context.Context, bin string, env []string, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %v: %w\n%s", filepath.Base(bin), args, err, out)
	}
	return nil
}

// tokenSet is the body of a successful login.
type tokenSet struct {
	Tokens struct {
		AccessToken  string `json:"access_token"`
		RefreshToken string `json:"refresh_token"`
		IDToken      string `json:"id_token"`
	} `json:"tokens"`
}

// post sends a JSON body and returns the status and body.
func post(ctx context.Context, c *http.Client, url, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return do(c, req)
}

func get(ctx context.Context, c *http.Client, url, bearer string) (int, http.Header, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, body, err
}

func do(c *http.Client, req *http.Request) (int, []byte, error) {
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// loopbackClient keeps enough idle connections for every worker, so that
// the load generator measures requests, not TCP handshakes.
func loopbackClient(workers int) *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns, t.MaxIdleConnsPerHost = workers*2, workers*2
	return &http.Client{Transport: t, Timeout: 30 * time.Second}
}

// jwtClaims decodes the payload of a JWT without verifying it: the bench
// only needs the ids the service put there.
func jwtClaims(raw string) (map[string]any, error) {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, err
	}
	var claims map[string]any
	return claims, json.Unmarshal(payload, &claims)
}

func jsonBody(v any) io.Reader {
	b, _ := json.Marshal(v)
	return bytes.NewReader(b)
}

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux that matters).
const clockTicks = 100

// processCPU reads the user plus system CPU time of process pid ("self"
// for this one) from /proc.
func processCPU(pid string) (time.Duration, error) {
	stat := readFile("/proc/" + pid + "/stat")
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, i.e. 12 and 13 after it.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no /proc/%s/stat: CPU times need Linux", pid)
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%s/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%s/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

func (p *process) cpuTime() (time.Duration, error) {
	return processCPU(strconv.Itoa(p.cmd.Process.Pid))
}

func selfCPU() (time.Duration, error) { return processCPU("self") }
