package delivery_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations/webhook/delivery"
)

// TestIncompleteAnswerFails: a 2xx whose body stalls past the timeout, or
// breaks off, is a failed attempt with a clear error (the status it
// answered kept); a 2xx read to its end succeeds.
func TestIncompleteAnswerFails(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	srv, _ := receiver(t, "127.0.0.1:0", func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/stall":
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(200)
			w.Write([]byte("12345"))
			w.(http.Flusher).Flush()
			select { // the rest never comes
			case <-r.Context().Done():
			case <-stop:
			}
		case "/short":
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(200)
			w.Write([]byte("12345")) // and the handler ends: the body breaks off
		default:
			w.WriteHeader(200)
			w.Write([]byte("ok"))
		}
	})
	allowed, _ := delivery.ParseAllowedCIDRs([]string{"127.0.0.0/8"})
	const timeout = 300 * time.Millisecond
	sender := delivery.NewSender(delivery.NewDialer(allowed, nil), timeout, 0)

	r := sender.Send(context.Background(), attempt(srv.URL+"/stall"))
	if r.Succeeded() || r.Status != 200 || !strings.Contains(r.Error, "no complete response within 300ms") {
		t.Errorf("stalled body: succeeded %v, status %d, error %q", r.Succeeded(), r.Status, r.Error)
	}
	r = sender.Send(context.Background(), attempt(srv.URL+"/short"))
	if r.Succeeded() || r.Status != 200 || !strings.Contains(r.Error, "broke off") {
		t.Errorf("body cut short: succeeded %v, status %d, error %q", r.Succeeded(), r.Status, r.Error)
	}
	if r := sender.Send(context.Background(), attempt(srv.URL+"/ok")); !r.Succeeded() || r.Error != "" {
		t.Errorf("complete answer: %d %q", r.Status, r.Error)
	}
}
