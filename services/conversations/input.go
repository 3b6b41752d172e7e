package conversations

import (
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// FieldError names one invalid input field.
type FieldError struct {
	Field  string
	Reason string
}

// ValidationError lists every invalid field of an input.
type ValidationError struct {
	Fields []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, 0, len(e.Fields))
	for _, f := range e.Fields {
		parts = append(parts, f.Field+" "+f.Reason)
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// NewConversation is the body of POST /v1/conversations.
type NewConversation struct {
	Subject       string     `json:"subject"`
	Status        Status     `json:"status"`
	Participants  []string   `json:"participants"`
	LastMessageAt *time.Time `json:"lastMessageAt"`
}

// Conversation validates the input and returns the conversation the caller
// creates in their account: the caller is always a participant (added when
// missing), duplicates are dropped, the status defaults to open.
func (in NewConversation) Conversation(accountID, caller string) (Conversation, error) {
	var fields []FieldError
	if utf8.RuneCountInString(in.Subject) > MaxSubjectLen {
		fields = append(fields, FieldError{"subject", fmt.Sprintf("must be at most %d characters", MaxSubjectLen)})
	}
	status := in.Status
	if status == "" {
		status = StatusOpen
	}
	if !status.Valid() {
		fields = append(fields, FieldError{"status", "must be open, snoozed or closed"})
	}
	participants := []string{caller}
	for i, p := range in.Participants {
		switch {
		case p == "" || len(p) > MaxParticipantLen:
			fields = append(fields, FieldError{fmt.Sprintf("participants[%d]", i), fmt.Sprintf("must be a user id of 1 to %d bytes", MaxParticipantLen)})
		case !slices.Contains(participants, p):
			participants = append(participants, p)
		}
	}
	if len(participants) > MaxParticipants {
		fields = append(fields, FieldError{"participants", fmt.Sprintf("must hold at most %d user ids, the caller included", MaxParticipants)})
	}
	if len(fields) > 0 {
		return Conversation{}, &ValidationError{Fields: fields}
	}
	c := Conversation{AccountID: accountID, Subject: in.Subject, Status: status, Participants: participants}
	if in.LastMessageAt != nil {
		t := in.LastMessageAt.UTC().Truncate(time.Millisecond)
		c.LastMessageAt = &t
	}
	return c, nil
}
