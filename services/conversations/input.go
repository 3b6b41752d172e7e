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
	Subject       string     `json:"subject"`
	Status        Status     `json:"status"`
	Participants  []string   `json:"participants"`
	LastMessageAt *time.Time `json:"lastMessageAt"`
}

// Conversation validates the input and returns the conversation the caller
// creates in their account: a user is always a participant (added when
// missing); a service client is none, so it names 1 to MaxParticipants
// participants itself. Duplicates are dropped, the status defaults to
// open. The error is a *validation.Error listing every offending field.
func (in NewConversation) Conversation(who Caller) (Conversation, error) {
	var invalid validation.Collector
	if utf8.RuneCountInString(in.Subject) > MaxSubjectLen {
		invalid.Add("subject", fmt.Sprintf("must be at most %d characters", MaxSubjectLen))
	}
	status := in.Status
	if status == "" {
		status = StatusOpen
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
		case p == "" || len(p) > MaxParticipantLen:
			invalid.Add(fmt.Sprintf("participants[%d]", i), fmt.Sprintf("must be a user id of 1 to %d bytes", MaxParticipantLen))
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
	if err := invalid.Err(); err != nil {
		return Conversation{}, err
	}
	c := Conversation{AccountID: who.AccountID, Subject: in.Subject, Status: status, Participants: participants}
	if in.LastMessageAt != nil {
		t := in.LastMessageAt.UTC().Truncate(time.Millisecond)
		c.LastMessageAt = &t
	}
	return c, nil
}

// NewMessage is the body of POST /v1/conversations/{id}/messages.
type NewMessage struct {
	Body     string          `json:"body"`
	Metadata json.RawMessage `json:"metadata"`
}

// Message validates the input and returns the message the caller posts to
// conversationID: body 1..MaxMessageBodyLen characters, metadata a JSON
// object of at most MaxMetadataLen bytes once compacted ({} when absent or
// null). The error is a *validation.Error listing every offending field.
func (in NewMessage) Message(who Caller, conversationID string) (Message, error) {
	var invalid validation.Collector
	if n := utf8.RuneCountInString(in.Body); n < 1 || n > MaxMessageBodyLen {
		invalid.Add("body", fmt.Sprintf("must be 1 to %d characters", MaxMessageBodyLen))
	}
	metadata := json.RawMessage(`{}`)
	if raw := bytes.TrimSpace(in.Metadata); len(raw) > 0 && !bytes.Equal(raw, []byte("null")) {
		var compact bytes.Buffer
		switch {
		case raw[0] != '{':
			invalid.Add("metadata", "must be a JSON object")
		case json.Compact(&compact, raw) != nil:
			invalid.Add("metadata", "must be a JSON object")
		case compact.Len() > MaxMetadataLen:
			invalid.Add("metadata", fmt.Sprintf("must be at most %d bytes of JSON", MaxMetadataLen))
		default:
			metadata = compact.Bytes()
		}
	}
	if err := invalid.Err(); err != nil {
		return Message{}, err
	}
	return Message{
		AccountID: who.AccountID, ConversationID: conversationID, Author: who.Author(),
		Body: in.Body, Metadata: metadata,
	}, nil
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
		case "subject":
			var s string
			switch {
			case isNull:
				p.Subject = &s // removing the subject leaves ""
			case json.Unmarshal(raw, &s) != nil:
				invalid.Add(name, "must be a JSON string or null")
			case utf8.RuneCountInString(s) > MaxSubjectLen:
				invalid.Add(name, fmt.Sprintf("must be at most %d characters", MaxSubjectLen))
			default:
				p.Subject = &s
			}
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
