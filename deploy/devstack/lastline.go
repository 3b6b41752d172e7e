package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
)

// lastLine remembers the last non-empty line written to it, so that when a
// service exits devstack can say why without sending the user to the log
// file. A line of the services' JSON logs is shown as its message and
// error.
type lastLine struct {
	mu      sync.Mutex
	partial []byte
	last    string
}

func (l *lastLine) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.partial = append(l.partial, p...)
	for {
		i := bytes.IndexByte(l.partial, '\n')
		if i < 0 {
			break
		}
		if line := strings.TrimSpace(string(l.partial[:i])); line != "" {
			l.last = line
		}
		l.partial = l.partial[i+1:]
	}
	// Bound what a line without an end can hold.
	if len(l.partial) > 64<<10 {
		l.partial = l.partial[len(l.partial)-64<<10:]
	}
	return len(p), nil
}

// String returns the last complete line, or a pending partial one.
func (l *lastLine) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	last := l.last
	if rest := strings.TrimSpace(string(l.partial)); rest != "" {
		last = rest
	}
	var entry struct {
		Msg   string `json:"msg"`
		Error string `json:"error"`
	}
	if json.Unmarshal([]byte(last), &entry) == nil && entry.Msg != "" {
		if entry.Error != "" {
			return entry.Msg + ": " + entry.Error
		}
		return entry.Msg
	}
	return last
}
