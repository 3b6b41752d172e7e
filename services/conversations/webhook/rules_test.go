package webhook

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/acme/platform/pkg/validation"
)

// The pure rules of Service, without a store: what an attempt's result
// makes of its delivery, and the wait before the next attempt.

func TestOutcome(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	w := &Service{RetrySchedule: []time.Duration{time.Minute, time.Hour}}
	tests := []struct {
		name     string
		refusal  string
		attempts int // before this one
		result   AttemptResult
		state    DeliveryState
		retry    bool // pending with a next attempt
		errText  string
	}{
		{name: "2xx succeeds", result: AttemptResult{Status: 204}, state: DeliverySucceeded},
		{name: "2xx whose body broke off fails", result: AttemptResult{Status: 200, Error: "body: unexpected EOF"}, state: DeliveryPending, retry: true, errText: "unexpected EOF"},
		{name: "5xx is retried", result: AttemptResult{Status: 503, Error: "the endpoint answered 503"}, state: DeliveryPending, retry: true, errText: "503"},
		{name: "no response is retried", result: AttemptResult{Error: "no response within 15s"}, state: DeliveryPending, retry: true, errText: "no response"},
		{name: "410 fails at once", result: AttemptResult{Status: 410, Error: "the endpoint answered 410"}, state: DeliveryFailed},
		{name: "a failure of the last retry fails", attempts: 2, result: AttemptResult{Status: 500, Error: "500"}, state: DeliveryFailed},
		{name: "a failure before the last retry waits", attempts: 1, result: AttemptResult{Status: 500, Error: "500"}, state: DeliveryPending, retry: true},
		{name: "a refused delivery fails unsent", refusal: "the endpoint was deleted", state: DeliveryFailed, errText: "deleted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := Attempt{Delivery: Delivery{Attempts: tc.attempts}, Refusal: tc.refusal}
			o := w.outcome(a, tc.result, now)
			if o.State != tc.state {
				t.Errorf("state %q, want %q", o.State, tc.state)
			}
			if got := o.NextAttemptAt != nil; got != tc.retry {
				t.Errorf("next attempt set %v, want %v", got, tc.retry)
			}
			if o.NextAttemptAt != nil && !o.NextAttemptAt.After(now) {
				t.Errorf("next attempt %v not after now", o.NextAttemptAt)
			}
			if tc.errText == "" && tc.state == DeliverySucceeded && o.Error != nil {
				t.Errorf("error %q on success", *o.Error)
			}
			if tc.errText != "" && (o.Error == nil || !strings.Contains(*o.Error, tc.errText)) {
				t.Errorf("error %v, want one containing %q", o.Error, tc.errText)
			}
			if tc.result.Status != 0 && (o.ResponseStatus == nil || *o.ResponseStatus != tc.result.Status) {
				t.Errorf("response status %v, want %d", o.ResponseStatus, tc.result.Status)
			}
			if tc.result.Status == 0 && o.ResponseStatus != nil {
				t.Errorf("response status %d without a response", *o.ResponseStatus)
			}
			if !o.At.Equal(now) {
				t.Errorf("at %v, want %v", o.At, now)
			}
		})
	}
}

func TestRetryDelay(t *testing.T) {
	w := &Service{RetrySchedule: []time.Duration{10 * time.Second, time.Hour}}
	tests := []struct {
		name       string
		done       int
		retryAfter time.Duration
		min, max   time.Duration
	}{
		{name: "first retry: the schedule's first wait ±20 %", done: 0, min: 8 * time.Second, max: 12 * time.Second},
		{name: "second retry: the next wait ±20 %", done: 1, min: 48 * time.Minute, max: 72 * time.Minute},
		{name: "beyond the schedule: its last wait", done: 5, min: 48 * time.Minute, max: 72 * time.Minute},
		{name: "a shorter Retry-After changes nothing", done: 0, retryAfter: time.Second, min: 8 * time.Second, max: 12 * time.Second},
		{name: "a longer Retry-After is the wait", done: 0, retryAfter: 10 * time.Minute, min: 10 * time.Minute, max: 10 * time.Minute},
		{name: "Retry-After is capped", done: 0, retryAfter: 72 * time.Hour, min: MaxRetryAfter, max: MaxRetryAfter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for range 200 { // the jitter is random: every draw within bounds
				if d := w.retryDelay(tc.done, tc.retryAfter); d < tc.min || d > tc.max {
					t.Fatalf("delay %v, want within [%v, %v]", d, tc.min, tc.max)
				}
			}
		})
	}
	// The default schedule when none is set.
	if d := (&Service{}).retryDelay(0, 0); d < 4*time.Second || d > 6*time.Second {
		t.Errorf("default first delay %v, want 5s ±20 %%", d)
	}
}

func TestSubscribed(t *testing.T) {
	tests := []struct {
		events []string
		typ    string
		want   bool
	}{
		{[]string{EventTypeAll}, "message.created", true},
		{[]string{"message.created"}, "message.created", true},
		{[]string{"message.created"}, "conversation.updated", false},
		{[]string{"message.created"}, EventTypeTest, true}, // sent on request, whatever the subscription
	}
	for _, tc := range tests {
		if got := (Endpoint{Events: tc.events}).Subscribed(tc.typ); got != tc.want {
			t.Errorf("%v subscribed to %q: %v, want %v", tc.events, tc.typ, got, tc.want)
		}
	}
}

func TestCheckEvents(t *testing.T) {
	tests := []struct {
		events []string
		ok     bool
	}{
		{[]string{EventTypeAll}, true},
		{[]string{"message.created", "conversation.updated"}, true},
		{nil, false},
		{[]string{EventTypeAll, "message.created"}, false},
		{[]string{"message.created", "message.created"}, false},
		{[]string{"message.deleted"}, false},
		{[]string{EventTypeTest}, false},
	}
	for _, tc := range tests {
		if reason := checkEvents(tc.events); (reason == "") != tc.ok {
			t.Errorf("checkEvents(%v) = %q, want ok %v", tc.events, reason, tc.ok)
		}
	}
}

func TestActiveSecrets(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Hour), now.Add(-time.Hour)
	e := Endpoint{Secrets: []SealedSecret{
		{Sealed: []byte("current")},
		{Sealed: []byte("overlapping"), NotAfter: &later},
		{Sealed: []byte("expired"), NotAfter: &earlier},
	}}
	var got []string
	for _, s := range e.activeSecrets(now) {
		got = append(got, string(s.Sealed))
	}
	if strings.Join(got, ",") != "current,overlapping" {
		t.Errorf("active %v, want current then overlapping", got)
	}
}

func TestSlotsRoom(t *testing.T) {
	s := Slots{Free: 10, PerEndpoint: 4, InFlight: map[string]int{"whk_busy": 3, "whk_full": 4}}
	for endpoint, want := range map[string]int{"whk_idle": 4, "whk_busy": 1, "whk_full": 0} {
		if got := s.room(endpoint); got != want {
			t.Errorf("room of %s: %d, want %d", endpoint, got, want)
		}
	}
}

// TestSign: the Standard Webhooks reference vector, and one signature per
// secret while a rotation overlaps.
func TestSign(t *testing.T) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	at := time.Unix(1614265330, 0)
	body := []byte(`{"test": 2432232314}`)
	got, err := Sign([]string{secret}, "msg_p5jXN8AQM9LWM0D4loKWxJek", at, body)
	if err != nil || got != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Fatalf("Sign = %q, %v", got, err)
	}
	two, err := Sign([]string{NewSecret(), secret}, "msg_p5jXN8AQM9LWM0D4loKWxJek", at, body)
	if sigs := strings.Fields(two); err != nil || len(sigs) != 2 || sigs[1] != got {
		t.Fatalf("two secrets: %q, %v", two, err)
	}
	if _, err := Sign([]string{"whsec_not base64!"}, "msg_1", at, body); err == nil {
		t.Fatal("a secret that is not base64 signed")
	}
}

func TestRotationOverlap(t *testing.T) {
	n := func(v int64) *int64 { return &v }
	longest := int64(MaxRotationOverlap / time.Second)
	tests := []struct {
		overlap *int64
		want    time.Duration
		ok      bool
	}{
		{nil, DefaultRotationOverlap, true},
		{n(0), 0, true},
		{n(90), 90 * time.Second, true},
		{n(longest), MaxRotationOverlap, true},
		{n(longest + 1), 0, false},
		{n(-1), 0, false},
	}
	for _, tc := range tests {
		got, err := Rotation{Overlap: tc.overlap}.overlap()
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("overlap %v: %v, %v; want %v, ok %v", tc.overlap, got, err, tc.want, tc.ok)
		}
		var invalid *validation.Error
		if err != nil && (!errors.As(err, &invalid) || invalid.Fields[0].Name != "overlap") {
			t.Errorf("overlap %v: error %v is not a validation error of overlap", tc.overlap, err)
		}
	}
}
