// Package procfile is the handshake on disk between package mongoproc,
// which starts embedded MongoDB servers as processes, and the embeddedmongo
// command that runs them: the address file a server writes once it
// answers, and the file lock that starters and an exiting server take so
// that no starter ever picks a server that is shutting down.
//
// It needs flock(2), so Unix only.
package procfile

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Server is what an address file holds.
type Server struct {
	// Addr is the host:port clients connect to.
	Addr string `json:"addr"`
	// PID is the server's process id.
	PID int `json:"pid"`
}

// Write writes s to path atomically (a temporary file renamed over path),
// so a reader never sees half a file.
func Write(path string, s Server) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encoding address file: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("writing address file: %w", err)
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("writing address file %s: %w", path, err)
	}
	return nil
}

// Read reads the address file at path. A missing file is an error for
// which errors.Is(err, fs.ErrNotExist) holds.
func Read(path string) (Server, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Server{}, err
	}
	var s Server
	if err := json.Unmarshal(data, &s); err != nil || s.Addr == "" || s.PID <= 0 {
		return Server{}, fmt.Errorf("address file %s is malformed: %q", path, data)
	}
	return s, nil
}

// RemoveIfOwn removes the address file at path if it names process pid. A
// server calls it on its way out: the file may meanwhile name a successor
// (when the server was wrongly taken for dead), whose file must stay.
func RemoveIfOwn(path string, pid int) error {
	s, err := Read(path)
	if err != nil || s.PID != pid {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing address file: %w", err)
	}
	return nil
}

// lockPoll is how often Lock retries a lock held by someone else.
const lockPoll = 20 * time.Millisecond

// Lock takes an exclusive flock on path (created if missing), retrying
// until ctx ends, and returns the function that releases it. The lock goes
// with the process: one that dies holding it releases it.
func Lock(ctx context.Context, path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("opening lock file: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			// Closing the file releases the lock.
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("waiting for the lock %s: %w", path, context.Cause(ctx))
		case <-time.After(lockPoll):
		}
	}
}

// Alive reports whether process pid exists and, where /proc tells, is not
// a zombie (an exited process its parent has not waited for yet).
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		// Without /proc, kill(2) has the last word; with it, a missing
		// entry means the process has just gone.
		_, procErr := os.Stat("/proc/self/stat")
		return procErr != nil
	}
	// The state follows the parenthesised command name, which may itself
	// hold spaces and parentheses.
	if i := bytes.LastIndexByte(stat, ')'); i >= 0 && i+2 < len(stat) {
		return stat[i+2] != 'Z'
	}
	return true
}
