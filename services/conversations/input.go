package conversations

import (
	"fmt"
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
// creates in their account: the caller is always a participant (added when
// missing), duplicates are dropped, the status defaults to open. The error
// is a *validation.Error listing every offending field.
func (in NewConversation) Conversation(accountID, caller string) (Conversation, error) {
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
	participants := []string{caller}
	for i, p := range in.Participants {
		switch {
		case p == "" || len(p) > MaxParticipantLen:
			invalid.Add(fmt.Sprintf("participants[%d]", i), fmt.Sprintf("must be a user id of 1 to %d bytes", MaxParticipantLen))
		case !slices.Contains(participants, p):
			participants = append(participants, p)
		}
	}
	if len(participants) > MaxParticipants {
		invalid.Add("participants", fmt.Sprintf("must hold at most %d user ids, the caller included", MaxParticipants))
	}
	if err := invalid.Err(); err != nil {
		return Conversation{}, err
	}
	c := Conversation{AccountID: accountID, Subject: in.Subject, Status: status, Participants: participants}
	if in.LastMessageAt != nil {
		t := in.LastMessageAt.UTC().Truncate(time.Millisecond)
		c.LastMessageAt = &t
	}
	return c, nil
}
