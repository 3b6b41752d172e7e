package conversations_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/services/conversations"
)

var who = conversations.Caller{AccountID: "acc_1", ID: "usr_1"}

// FuzzNewMessage decodes arbitrary bodies of POST .../messages as the
// handler does (strict types, then NewMessage.Message). The result is a
// *validation.Error naming only body and metadata, or a message with a
// body of 1..10000 characters, a compact JSON object of at most 16 KiB as
// metadata, the caller as author and the conversation given.
func FuzzNewMessage(f *testing.F) {
	for _, seed := range []string{
		`{"body":"hi"}`, `{"body":""}`, `{}`, `{"body":"x","metadata":{}}`, `{"body":"x","metadata":null}`,
		`{"body":"x","metadata":[1]}`, `{"body":"x","metadata":"s"}`, `{"body":"x","metadata":{"a":{"b":[1,2,{"c":null}]}}}`,
		`{"body":"x","metadata":{ "spaced" : true }}`, `{"body":5}`, `{"body":"\u00e9\ud83d\ude00"}`, `{"body":"x","metadata":{"$gt":1,"a.b":2}}`,
		`{"body":"` + strings.Repeat("a", 10001) + `"}`, `{"body":"x","metadata":{"k":"` + strings.Repeat("v", 16<<10) + `"}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var in conversations.NewMessage
		if json.Unmarshal(data, &in) != nil {
			return // the HTTP layer answers 400 before validation
		}
		m, err := in.Message(who, "cnv_1")
		if err != nil {
			var invalid *validation.Error
			if !errors.As(err, &invalid) || len(invalid.Fields) == 0 {
				t.Fatalf("%q: error %v is not a validation error with fields", data, err)
			}
			for _, field := range invalid.Fields {
				if !slices.Contains([]string{"body", "metadata"}, field.Name) || field.Reason == "" {
					t.Fatalf("%q: field error %+v", data, field)
				}
			}
			return
		}
		if n := utf8.RuneCountInString(m.Body); n < 1 || n > conversations.MaxMessageBodyLen || m.Body != in.Body {
			t.Fatalf("%q: body of %d characters accepted", data, n)
		}
		var meta map[string]any
		if json.Unmarshal(m.Metadata, &meta) != nil || meta == nil || len(m.Metadata) > conversations.MaxMetadataLen {
			t.Fatalf("%q: metadata %q is not a JSON object within the limit", data, m.Metadata)
		}
		var compact bytes.Buffer
		if json.Compact(&compact, m.Metadata) != nil || !bytes.Equal(compact.Bytes(), m.Metadata) {
			t.Fatalf("%q: metadata %q is not compact", data, m.Metadata)
		}
		if m.Author != who.ID || m.AccountID != who.AccountID || m.ConversationID != "cnv_1" || m.ID != "" || !m.CreatedAt.IsZero() {
			t.Fatalf("%q: message %+v", data, m)
		}
	})
}

// FuzzMergePatch decodes arbitrary merge patches of a conversation as the
// PATCH handler does and applies them. A patch is refused with a
// validation error naming members it holds, or it sets at most subject
// and status to valid values; applying it never touches id, participants,
// createdAt or lastMessageAt, moves updatedAt forward exactly when
// something changed, and applying it twice changes nothing the second
// time.
func FuzzMergePatch(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"subject":"new"}`, `{"subject":null}`, `{"status":"closed"}`, `{"status":"snoozed","subject":""}`,
		`{"status":null}`, `{"status":"archived"}`, `{"id":"x"}`, `{"participants":[]}`, `{"createdAt":"2020-01-01T00:00:00Z"}`,
		`{"lastMessageAt":null}`, `{"unknown":1}`, `{"subject":1}`, `{"subject":{"$set":1}}`, `{"subject":"` + strings.Repeat("s", 301) + `"}`,
		`{"subject":"a","subject":"b"}`, `{"Subject":"case"}`, `{"status":"open","updatedAt":"x"}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var members map[string]json.RawMessage
		if json.Unmarshal(data, &members) != nil || members == nil {
			return // the HTTP layer answers 400 before validation
		}
		p, err := conversations.ParsePatch(members)
		if err != nil {
			var invalid *validation.Error
			if !errors.As(err, &invalid) || len(invalid.Fields) == 0 {
				t.Fatalf("%q: error %v is not a validation error with fields", data, err)
			}
			for _, field := range invalid.Fields {
				if _, ok := members[field.Name]; !ok || field.Reason == "" {
					t.Fatalf("%q: field error %+v names no member of the patch", data, field)
				}
			}
			return
		}
		for name := range members {
			if name != "subject" && name != "status" {
				t.Fatalf("%q: member %q accepted", data, name)
			}
		}
		if p.Subject != nil && utf8.RuneCountInString(*p.Subject) > conversations.MaxSubjectLen {
			t.Fatalf("%q: subject too long accepted", data)
		}
		if p.Status != nil && !p.Status.Valid() {
			t.Fatalf("%q: status %q accepted", data, *p.Status)
		}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		last := t0.Add(-time.Hour)
		before := conversations.Conversation{
			ID: "cnv_1", AccountID: "acc_1", Subject: "old", Status: conversations.StatusOpen,
			Participants: []string{"usr_1"}, CreatedAt: t0.Add(-2 * time.Hour), UpdatedAt: t0, LastMessageAt: &last, Version: 3,
		}
		after := before
		changed := p.Apply(&after, t0) // a clock that has not moved
		if after.ID != before.ID || after.AccountID != before.AccountID || !slices.Equal(after.Participants, before.Participants) ||
			!after.CreatedAt.Equal(before.CreatedAt) || after.LastMessageAt != before.LastMessageAt || after.Version != before.Version {
			t.Fatalf("%q: the patch touched what it may not: %+v", data, after)
		}
		if changed != (after.Subject != before.Subject || after.Status != before.Status) || changed != after.UpdatedAt.After(before.UpdatedAt) {
			t.Fatalf("%q: changed %v, but %+v from %+v", data, changed, after, before)
		}
		again := after
		if p.Apply(&again, t0) || !again.UpdatedAt.Equal(after.UpdatedAt) {
			t.Fatalf("%q: applying the patch twice changed it twice", data)
		}
	})
}
