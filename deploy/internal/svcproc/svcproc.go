// Package svcproc runs a service binary as a child process, for the
// end-to-end tests and the benchmark harness: start it, wait for its
// /readyz, stop it with SIGTERM, and read what it logged and used.
package svcproc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
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

// Process is one running service binary.
type Process struct {
	Cmd *exec.Cmd
	// Logs receives the process's stdout and stderr. exec's copier
	// goroutine writes it until the process has been waited for: read it
	// once the process has exited.
	Logs *bytes.Buffer
	// Done receives the result of Wait, once.
	Done chan error
	// Ready is the time from exec to the first 200 of /readyz.
	Ready   time.Duration
	OpsAddr string

	started time.Time
	exited  chan struct{} // closed when Wait has returned
	err     error         // Wait's result, set before exited is closed
}

// Start runs bin with env added to this process's environment and returns
// once GET http://opsAddr/readyz answers 200, polling every 2 ms so that
// Ready is not rounded up much. It kills the process and fails when it
// exits first, when timeout passes or when ctx ends.
func Start(ctx context.Context, bin string, env []string, opsAddr string, timeout time.Duration) (*Process, error) {
	p, err := Launch(bin, env, opsAddr)
	if err != nil {
		return nil, err
	}
	if err := p.WaitReady(ctx, timeout); err != nil {
		return nil, err
	}
	return p, nil
}

// Launch runs bin with env added to this process's environment, without
// waiting for it to be ready (see WaitReady).
func Launch(bin string, env []string, opsAddr string) (*Process, error) {
	p := &Process{Cmd: exec.Command(bin), Logs: &bytes.Buffer{}, Done: make(chan error, 1), OpsAddr: opsAddr, exited: make(chan struct{})}
	p.Cmd.Env = append(os.Environ(), env...)
	p.Cmd.Stdout, p.Cmd.Stderr = p.Logs, p.Logs
	p.started = time.Now()
	if err := p.Cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	go func() {
		p.err = p.Cmd.Wait()
		close(p.exited)
		p.Done <- p.err
	}()
	return p, nil
}

// WaitReady returns once GET http://OpsAddr/readyz answers 200 and sets
// Ready. It kills the process and fails when it exits first, when timeout
// (from the launch) passes or when ctx ends.
func (p *Process) WaitReady(ctx context.Context, timeout time.Duration) error {
	name, started := filepath.Base(p.Cmd.Path), p.started
	client := &http.Client{Timeout: time.Second}
	deadline := started.Add(timeout)
	for {
		resp, err := client.Get("http://" + p.OpsAddr + "/readyz")
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				p.Ready = time.Since(started)
				return nil
			}
		}
		select {
		case <-p.exited:
			return fmt.Errorf("%s exited before ready: %v; logs:\n%s", name, p.err, p.Logs)
		case <-ctx.Done():
			p.Kill()
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Kill()
			return fmt.Errorf("%s not ready after %s; logs:\n%s", name, timeout, p.Logs)
		}
	}
}

// Stop sends SIGTERM and waits up to timeout for a clean exit; after
// that it kills the process.
func (p *Process) Stop(timeout time.Duration) error {
	name := filepath.Base(p.Cmd.Path)
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			return fmt.Errorf("%s: exit after SIGTERM: %w; logs:\n%s", name, p.err, p.Logs)
		}
		return nil
	case <-time.After(timeout):
		p.Kill()
		return fmt.Errorf("%s: no exit %s after SIGTERM", name, timeout)
	}
}

// Kill kills the process, if it still runs, and waits for it to exit.
func (p *Process) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.exited
}

// PeakRSS is the process's resident-set high-water mark (VmHWM) in MiB;
// zero where /proc is not available.
func (p *Process) PeakRSS() float64 { return p.statusMiB("VmHWM:") }

// RSS is the process's resident set now (VmRSS) in MiB; zero where /proc
// is not available.
func (p *Process) RSS() float64 { return p.statusMiB("VmRSS:") }

// statusMiB reads a field of /proc/<pid>/status given in kB, in MiB.
func (p *Process) statusMiB(field string) float64 {
	for line := range strings.Lines(readFile(fmt.Sprintf("/proc/%d/status", p.Cmd.Process.Pid))) {
		if v, ok := strings.CutPrefix(line, field); ok {
			kib, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 64)
			if err == nil {
				return kib / 1024
			}
		}
	}
	return 0
}

// CPUTime is the user plus system CPU time the process has used so far.
func (p *Process) CPUTime() (time.Duration, error) { return CPUTime(p.Cmd.Process.Pid) }

// clockTicks is the unit of the CPU times in /proc/<pid>/stat (USER_HZ,
// 100 on every Linux that matters).
const clockTicks = 100

// CPUTime reads the user plus system CPU time of process pid from /proc
// (Linux only), in clock ticks of 10 ms.
func CPUTime(pid int) (time.Duration, error) {
	stat := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	// The command name (field 2) is in parentheses and may hold spaces;
	// utime and stime are fields 14 and 15, i.e. 12 and 13 after it.
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no /proc/%d/stat: CPU times need Linux", pid)
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	utime, err1 := strconv.ParseInt(fields[11], 10, 64)
	stime, err2 := strconv.ParseInt(fields[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(utime+stime) * time.Second / clockTicks, nil
}

// FreeAddr returns a loopback address with a port that was free a moment
// ago. The port is drawn below Linux's ephemeral range (32768 and up): the
// kernel hands those out as the local ports of outgoing connections, and
// with many tests connecting at once one of them may take a service's port
// between this check and the service's bind, or while it restarts.
//
// Each port handed out is also reserved for portReservation in a folder
// every test process of the machine shares (also two make test side by
// side): two tests drawing the same free port before either service binds
// it would otherwise have one service fail with "address already in use".
func FreeAddr() (string, error) {
	for range 100 {
		port := 20000 + rand.IntN(12000)
		if !reservePort(port) {
			continue
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			return addr, nil
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// portReservation is how long a port FreeAddr handed out is not handed out
// again: longer than any test keeps a service on it.
const portReservation = 30 * time.Minute

// reservePort claims port in the shared reservation folder, taking over a
// reservation older than portReservation. It reports false when another
// process holds it; when the folder cannot be used, every port is free to
// take, as before reservations.
func reservePort(port int) bool {
	base, err := os.UserCacheDir()
	if err != nil {
		return true
	}
	dir := filepath.Join(base, "acme-platform-test-ports")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return true
	}
	path := filepath.Join(dir, strconv.Itoa(port))
	for range 2 {
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err == nil {
			_ = f.Close()
			return true
		}
		if !errors.Is(err, os.ErrExist) {
			return true
		}
		info, err := os.Stat(path)
		if err != nil || time.Since(info.ModTime()) < portReservation {
			return false
		}
		_ = os.Remove(path) // stale: take it over
	}
	return false
}

func readFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return string(b)
}
