package conversations

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
)

// NewConversation is the body of POST /v1/conversations.
type NewConversation struct {
	Subject string `json:"subject"`
	// Status is nil when absent (open); "" is refused like any other
	// value that is not a status.
	Status       *Status  `json:"status"`
	Participants []string `json:"participants"`
	// LastMessageAt is the JSON value as sent (absent or null for
	// none), parsed by Conversation, so that a malformed or
	// out-of-range time is a field error naming it.
	LastMessageAt json.RawMessage `json:"lastMessageAt"`
}

// Conversation validates the input and returns the conversation the caller
// creates in their account: a user is always a participant (added when
// missing); a service client is none, so it names 1 to MaxParticipants
// participants itself, each a user id (ValidUserID). Duplicates are
// dropped, the status defaults to open; lastMessageAt, when given, is an
// RFC 3339 date-time within LastMessageAtRange, stored in UTC at
// millisecond precision. The error is a *validation.Error listing every
// offending field.
func (in NewConversation) Conversation(who Caller) (Conversation, error) {
	var invalid validation.Collector
	if utf8.RuneCountInString(in.Subject) > MaxSubjectLen {
		invalid.Add("subject", fmt.Sprintf("must be at most %d characters", MaxSubjectLen))
	}
	status := StatusOpen
	if in.Status != nil {
		status = *in.Status
	}
	if !status.Valid() {
		invalid.Add("status", "must be open, snoozed or closed")
	}
	var participants []string
	if !who.Client {
		participants = append(participants, who.ID)
	}
	for i, p := range in.Participants {
		switch {
		case !ValidUserID(p):
			invalid.Add(fmt.Sprintf("participants[%d]", i), UserIDForm)
		case !slices.Contains(participants, p):
			participants = append(participants, p)
		}
	}
	switch {
	case who.Client && (len(participants) == 0 || len(participants) > MaxParticipants):
		invalid.Add("participants", fmt.Sprintf("must hold 1 to %d user ids: a service client takes part in no conversation, so it names every participant", MaxParticipants))
	case len(participants) > MaxParticipants:
		invalid.Add("participants", fmt.Sprintf("must hold at most %d user ids, the caller included", MaxParticipants))
	}
	lastMessageAt, err := parseLastMessageAt(in.LastMessageAt, time.Now())
	if err != nil {
		invalid.Add("lastMessageAt", err.Error())
	}
	if err := invalid.Err(); err != nil {
		return Conversation{}, err
	}
	c := Conversation{AccountID: who.AccountID, Subject: in.Subject, Status: status, Participants: participants,
		LastMessageAt: lastMessageAt}
	return c, nil
}

// parseLastMessageAt parses the lastMessageAt of a new conversation: nil
// when absent or null, else an RFC 3339 date-time within
// LastMessageAtRange at now, in UTC, truncated to milliseconds. The error
// is the reason for the field error.
func parseLastMessageAt(raw json.RawMessage, now time.Time) (*time.Time, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return nil, nil
	}
	earliest, latest := LastMessageAtRange(now)
	reason := fmt.Errorf("must be an RFC 3339 date-time from %s to one day after now (%s), or null",
		FormatTime(earliest), FormatTime(latest))
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return nil, reason
	}
	t, err := ParseTime(s)
	if err != nil || t.Before(earliest) || t.After(latest) {
		return nil, reason
	}
	return &t, nil
}

// Patch is a validated JSON merge patch (RFC 7396) of a conversation: the
// members it sets; nil leaves a member as it is.
type Patch struct {
	Subject *string
	Status  *Status
}

// ParsePatch validates the members of a merge patch document. Only
// subject (a string of at most MaxSubjectLen characters, or null for
// "") and status (one of the statuses) may be set; any other member,
// those of the server (id, participants, createdAt, ...) included, is
// refused rather than ignored, so that a client never believes it changed
// something it did not. The error is a *validation.Error.
func ParsePatch(members map[string]json.RawMessage) (Patch, error) {
	var invalid validation.Collector
	var p Patch
	for _, name := range slices.Sorted(maps.Keys(members)) {
		raw := bytes.TrimSpace(members[name])
		isNull := bytes.Equal(raw, []byte("null"))
		switch name {
		case "subject": // null removes the subject, leaving ""
			p.Subject = invalid.NullableString(name, raw, func(s string) string {
				if utf8.RuneCountInString(s) > MaxSubjectLen {
					return fmt.Sprintf("must be at most %d characters", MaxSubjectLen)
				}
				return ""
			})
		case "status":
			var s Status
			if isNull || json.Unmarshal(raw, &s) != nil || !s.Valid() {
				invalid.Add(name, "must be open, snoozed or closed")
			} else {
				p.Status = &s
			}
		case "id", "participants", "createdAt", "updatedAt", "lastMessageAt":
			invalid.Add(name, "cannot be changed by a merge patch")
		default:
			invalid.Add(name, "is not a member of a conversation that a merge patch may set (subject, status)")
		}
	}
	if err := invalid.Err(); err != nil {
		return Patch{}, err
	}
	return p, nil
}
