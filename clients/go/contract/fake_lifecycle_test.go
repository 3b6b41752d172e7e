package contract_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	client "github.com/acme/platform/clients/go"
	"github.com/acme/platform/pkg/problem"
)

// recorded is one request as the fake received it.
type recorded struct {
	Method, Path string
	Header       http.Header
	Body         string
}

// savedResponse is the first response to an Idempotency-Key.
type savedResponse struct {
	body   string // the request body it answered
	status int
	header http.Header
	resp   []byte
}

// recordLocked keeps a request with a body or a precondition; f.mu is held.
func (f *fake) recordLocked(r *http.Request, body []byte) {
	rec := recorded{Method: r.Method, Path: r.URL.EscapedPath(), Header: r.Header.Clone(), Body: string(body)}
	if r.URL.Path == "/oauth2/token" {
		f.tokenReqs = append(f.tokenReqs, rec)
		return
	}
	f.requests = append(f.requests, rec)
}

// recordedRequests returns the recorded requests of method to paths with
// the prefix.
func (f *fake) recordedRequests(method, pathPrefix string) []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []recorded
	for _, r := range f.requests {
		if r.Method == method && strings.HasPrefix(r.Path, pathPrefix) {
			out = append(out, r)
		}
	}
	return out
}

// nth returns the i-th conversation of the store, newest first.
func (f *fake) nth(i int) client.Conversation {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.convs[i]
}

// newest returns the conversation changed last.
func (f *fake) newest() client.Conversation { return f.nth(0) }

// isClient reports whether sub is a service client (the fake's client ids
// start with "cli_").
func isClient(sub string) bool { return strings.HasPrefix(sub, "cli_") }

// visibleLocked returns the index of conversation id in f.convs when sub
// may see it, -1 otherwise; f.mu is held.
func (f *fake) visibleLocked(id, sub string) int {
	for i, c := range f.convs {
		if c.ID == id && (isClient(sub) || slices.Contains(c.Participants, sub)) {
			return i
		}
	}
	return -1
}

func etag(version int) string { return fmt.Sprintf(`"%d"`, version) }

// writeConversation answers with conversation i and its ETag; f.mu is held.
func (f *fake) writeConversationLocked(w http.ResponseWriter, status int, i int) {
	c := f.convs[i]
	w.Header().Set("ETag", etag(f.versions[c.ID]))
	if status == http.StatusCreated {
		w.Header().Set("Location", "/v1/conversations/"+c.ID)
	}
	writeJSON(w, status, c)
}

// idempotent answers a request with an Idempotency-Key sent before (by the
// same caller, to the same path) with the first response, and one whose key
// was used with another body with a 422.
func (f *fake) idempotent(next func(w http.ResponseWriter, r *http.Request, sub string)) func(w http.ResponseWriter, r *http.Request, sub string) {
	return func(w http.ResponseWriter, r *http.Request, sub string) {
		key := r.Header.Get("Idempotency-Key")
		if key == "" {
			next(w, r, sub)
			return
		}
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		f.idemMu.Lock() // one request per key at a time, as the service's claim
		defer f.idemMu.Unlock()
		id := sub + " " + r.URL.Path + " " + key
		f.mu.Lock()
		saved, ok := f.saved[id]
		f.mu.Unlock()
		if ok {
			if saved.body != string(body) {
				_ = problem.Write(w, problem.New(http.StatusUnprocessableEntity, client.CodeIdempotencyKeyReused,
					"This Idempotency-Key was used with another request."))
				return
			}
			for k, v := range saved.header {
				w.Header()[k] = v
			}
			w.Header().Set("Idempotent-Replayed", "true")
			w.WriteHeader(saved.status)
			_, _ = w.Write(saved.resp)
			return
		}
		rec := httptest.NewRecorder()
		next(rec, r, sub)
		if rec.Code >= 200 && rec.Code < 300 {
			f.mu.Lock()
			f.saved[id] = savedResponse{body: string(body), status: rec.Code, header: rec.Header().Clone(), resp: rec.Body.Bytes()}
			f.mu.Unlock()
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}
}

// conversationLocked finds the conversation of the request's path among
// those sub sees, or answers 404.
func (f *fake) conversationLocked(w http.ResponseWriter, r *http.Request, sub string) (int, bool) {
	i := f.visibleLocked(r.PathValue("id"), sub)
	if i < 0 {
		_ = problem.Write(w, problem.NotFound("No conversation with this id among yours."))
		return 0, false
	}
	return i, true
}

// editableLocked is conversationLocked for a change: the request's
// If-Match must hold too (else 412).
func (f *fake) editableLocked(w http.ResponseWriter, r *http.Request, sub string) (int, bool) {
	i, ok := f.conversationLocked(w, r, sub)
	if !ok || !precondition(w, r, f.versions[f.convs[i].ID]) {
		return 0, false
	}
	return i, true
}

// precondition checks If-Match against the version; false when it wrote
// the 412.
func precondition(w http.ResponseWriter, r *http.Request, version int) bool {
	h := r.Header.Get("If-Match")
	if h == "" || h == "*" {
		return true
	}
	for _, tag := range strings.Split(h, ",") {
		if strings.TrimSpace(tag) == etag(version) {
			return true
		}
	}
	_ = problem.Write(w, problem.New(http.StatusPreconditionFailed, client.CodePreconditionFailed,
		"The conversation has changed since the If-Match tag was issued."))
	return false
}

// now is the fake's clock for changes: after every time it handed out.
func (f *fake) nowLocked() time.Time {
	f.seq++
	return time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(f.seq) * time.Second)
}

// touchLocked moves conversation i to the front with a new updatedAt and
// version; f.mu is held. It returns the conversation's new index (0).
func (f *fake) touchLocked(i int, at time.Time) int {
	c := f.convs[i]
	c.UpdatedAt = at
	f.versions[c.ID]++
	f.convs = append(f.convs[:i], f.convs[i+1:]...)
	f.convs = append([]client.Conversation{c}, f.convs...)
	return 0
}

func (f *fake) handlePatch(w http.ResponseWriter, r *http.Request, sub string) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/merge-patch+json" {
		_ = problem.Write(w, problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMediaType,
			"The request body must be sent with Content-Type application/merge-patch+json."))
		return
	}
	var in map[string]json.RawMessage
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		_ = problem.Write(w, problem.BadRequest(problem.CodeMalformedJSON, "The request body is not valid JSON."))
		return
	}
	var subject, status *string
	for name, raw := range in {
		var s string
		switch {
		case name != "subject" && name != "status":
			_ = problem.Write(w, problem.Validation(problem.FieldError{Field: name, Reason: "cannot be changed"}))
			return
		case name == "subject" && string(raw) == "null":
			subject = &s
			continue
		case json.Unmarshal(raw, &s) != nil:
			_ = problem.Write(w, problem.Validation(problem.FieldError{Field: name, Reason: "must be a string"}))
			return
		case name == "status" && !slices.Contains([]string{"open", "snoozed", "closed"}, s):
			_ = problem.Write(w, problem.Validation(problem.FieldError{Field: "status", Reason: "must be open, snoozed or closed"}))
			return
		case name == "subject":
			subject = &s
		default:
			status = &s
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.editableLocked(w, r, sub)
	if !ok {
		return
	}
	changed := false
	if subject != nil && *subject != f.convs[i].Subject {
		f.convs[i].Subject, changed = *subject, true
	}
	if status != nil && *status != f.convs[i].Status {
		f.convs[i].Status, changed = *status, true
	}
	if changed {
		i = f.touchLocked(i, f.nowLocked())
	}
	f.writeConversationLocked(w, http.StatusOK, i)
}

func (f *fake) handleParticipant(w http.ResponseWriter, r *http.Request, sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.editableLocked(w, r, sub)
	if !ok {
		return
	}
	user := r.PathValue("userId")
	parts := f.convs[i].Participants
	has := slices.Contains(parts, user)
	switch {
	case r.Method == http.MethodPut && !has && len(parts) >= 100:
		_ = problem.Write(w, problem.New(http.StatusConflict, client.CodeTooManyParticipants, "A conversation has at most 100 participants."))
		return
	case r.Method == http.MethodDelete && has && len(parts) == 1:
		_ = problem.Write(w, problem.New(http.StatusConflict, client.CodeLastParticipant, "The last participant cannot leave."))
		return
	case r.Method == http.MethodPut && !has:
		f.convs[i].Participants = append(slices.Clone(parts), user)
		i = f.touchLocked(i, f.nowLocked())
	case r.Method == http.MethodDelete && has:
		f.convs[i].Participants = slices.DeleteFunc(slices.Clone(parts), func(p string) bool { return p == user })
		i = f.touchLocked(i, f.nowLocked())
	}
	w.Header().Set("ETag", etag(f.versions[f.convs[i].ID]))
	w.WriteHeader(http.StatusNoContent)
}

func (f *fake) handlePostMessage(w http.ResponseWriter, r *http.Request, sub string) {
	var in struct {
		Body     *string         `json:"body"`
		Metadata json.RawMessage `json:"metadata"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil {
		_ = problem.Write(w, problem.BadRequest(problem.CodeMalformedJSON, "The request body is not valid JSON."))
		return
	}
	if in.Body == nil || *in.Body == "" {
		_ = problem.Write(w, problem.Validation(problem.FieldError{Field: "body", Reason: "is required: 1 to 10000 characters"}))
		return
	}
	if len(in.Metadata) == 0 {
		in.Metadata = json.RawMessage(`{}`)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	i, ok := f.conversationLocked(w, r, sub)
	if !ok {
		return
	}
	c := &f.convs[i]
	switch c.Status {
	case client.StatusClosed:
		_ = problem.Write(w, problem.New(http.StatusConflict, client.CodeConversationClosed, "The conversation is closed; reopen it first."))
		return
	case client.StatusSnoozed:
		c.Status = client.StatusOpen
	}
	at := f.nowLocked()
	var compact bytes.Buffer
	_ = json.Compact(&compact, in.Metadata)
	m := client.Message{
		ID: fmt.Sprintf("msg_%04d", f.seq), ConversationID: c.ID, Author: sub,
		Body: *in.Body, Metadata: compact.Bytes(), CreatedAt: at,
	}
	f.msgs[c.ID] = append([]client.Message{m}, f.msgs[c.ID]...)
	c.LastMessageAt = &at
	f.touchLocked(i, at)
	w.Header().Set("Location", "/v1/conversations/"+m.ConversationID+"/messages/"+m.ID)
	writeJSON(w, http.StatusCreated, m)
}

func (f *fake) handleListMessages(w http.ResponseWriter, r *http.Request, sub string) {
	q := r.URL.Query()
	id := r.PathValue("id")
	limit := 10
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			_ = problem.Write(w, problem.Validation(problem.FieldError{Field: "limit", Reason: "must be an integer from 1 to 100"}))
			return
		}
		limit = n
	}
	offset := 0
	if c := q.Get("cursor"); c != "" {
		raw, _ := base64.RawURLEncoding.DecodeString(c)
		parts := strings.Split(string(raw), "|")
		n, err := strconv.Atoi(parts[len(parts)-1])
		if len(parts) != 2 || parts[0] != id || err != nil {
			_ = problem.Write(w, problem.Validation(problem.FieldError{Field: "cursor", Reason: "is not a valid cursor for this listing"}))
			return
		}
		offset = n
	}
	f.mu.Lock()
	if f.visibleLocked(id, sub) < 0 {
		f.mu.Unlock()
		_ = problem.Write(w, problem.NotFound("No conversation with this id among yours."))
		return
	}
	all := f.msgs[id]
	page := append([]client.Message{}, all[min(offset, len(all)):min(offset+limit, len(all))]...)
	more := offset+limit < len(all)
	f.mu.Unlock()
	if more {
		next := url.Values{}
		next.Set("limit", strconv.Itoa(limit))
		next.Set("cursor", base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%s|%d", id, offset+limit)))
		w.Header().Set("Link", `</v1/conversations/`+id+`/messages?`+next.Encode()+`>; rel="next"`)
	}
	writeJSON(w, http.StatusOK, page)
}

func (f *fake) handleGetMessage(w http.ResponseWriter, r *http.Request, sub string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.PathValue("id")
	if f.visibleLocked(id, sub) >= 0 {
		for _, m := range f.msgs[id] {
			if m.ID == r.PathValue("messageId") {
				writeJSON(w, http.StatusOK, m)
				return
			}
		}
	}
	_ = problem.Write(w, problem.NotFound("No such message."))
}
