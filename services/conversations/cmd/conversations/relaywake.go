package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// relayWakePath is the route of the operations listener at which another
// replica wakes this one's relay: it recorded a change of an account
// whose partition this replica holds. At relayPartitionsPath it asks this
// one to read the relay's leases now: it joined, or released partitions.
const (
	relayWakePath       = "/relay/wake"
	relayPartitionsPath = "/relay/partitions"
)

// relayWakeTimeout bounds one wake; one that fails is left to the
// holder's poll.
const relayWakeTimeout = time.Second

// maxFailingWakes bounds the addresses a waker remembers failing.
const maxFailingWakes = 1024

// relayWaker wakes the relays of other replicas (or their partitions),
// one request at a time per replica and path: wakes asked while one is
// under way make one more after it, so a burst of changes costs the
// holder a round or two, not one each.
type relayWaker struct {
	client *http.Client
	logger *slog.Logger

	mu      sync.Mutex
	pending map[string]bool // URL → a wake is under way; true: another after it
	failing map[string]bool // URL → its last wake failed (logged once)
}

func newRelayWaker(logger *slog.Logger) *relayWaker {
	return &relayWaker{
		client:  &http.Client{Timeout: relayWakeTimeout},
		logger:  logger,
		pending: map[string]bool{},
		failing: map[string]bool{},
	}
}

// wake asks the replica whose operations listener is at addr to relay
// now (relayWakePath) or to read its leases now (relayPartitionsPath),
// without waiting.
func (w *relayWaker) wake(addr, path string) {
	url := "http://" + addr + path
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, busy := w.pending[url]; busy {
		w.pending[url] = true
		return
	}
	w.pending[url] = false
	go w.send(url)
}

func (w *relayWaker) send(url string) {
	for {
		ctx, cancel := context.WithTimeout(context.Background(), relayWakeTimeout)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err == nil {
			var resp *http.Response
			if resp, err = w.client.Do(req); err == nil {
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusNoContent {
					err = fmt.Errorf("answered %s", resp.Status)
				}
			}
		}
		cancel()
		w.mu.Lock()
		// The first failure after a success is a warning: the holder's
		// changes from here wait for its poll until the wakes get through.
		switch {
		case err != nil && !w.failing[url]:
			if len(w.failing) >= maxFailingWakes {
				clear(w.failing) // replicas that died long ago
			}
			w.failing[url] = true
			w.logger.Warn("wake relay", "url", url, "error", err.Error())
		case err == nil && w.failing[url]:
			delete(w.failing, url)
			w.logger.Info("wake relay again", "url", url)
		}
		if !w.pending[url] {
			delete(w.pending, url)
			w.mu.Unlock()
			return
		}
		w.pending[url] = false
		w.mu.Unlock()
	}
}

// relayWakeHandler answers a wake of this replica's relay (or of its
// partitions).
func relayWakeHandler(wake func()) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		wake()
		w.WriteHeader(http.StatusNoContent)
	})
}

// wakeAddr is the address the other replicas wake this one at: host (or
// else the operations address's) and the operations port ("": none, when
// neither names a host or the port is chosen at start, and this
// replica's changes wake no other).
func wakeAddr(host, opsAddr string) string {
	opsHost, port, err := net.SplitHostPort(opsAddr)
	if err != nil || port == "0" || port == "" {
		return ""
	}
	if host == "" {
		host = opsHost
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		return ""
	}
	return net.JoinHostPort(host, port)
}
