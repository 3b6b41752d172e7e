// Package conversations is the domain of the conversations service
// (Interface B): conversations between users of one account, and the
// keyset-paged listing of a caller's conversations. It holds types,
// interfaces and validation only; MongoDB lives in package mongo, HTTP in
// package http, and cmd/conversations wires them.
package conversations

import (
	"context"
	"errors"
	"time"
)

// Domain errors; stores return them wrapped, the HTTP layer maps them.
var (
	// ErrNotFound: no such conversation among the caller's.
	ErrNotFound = errors.New("not found")
)

// Status is the state of a conversation.
type Status string

// The statuses of the contract.
const (
	StatusOpen    Status = "open"
	StatusSnoozed Status = "snoozed"
	StatusClosed  Status = "closed"
)

// Valid reports whether s is one of the contract's statuses.
func (s Status) Valid() bool {
	return s == StatusOpen || s == StatusSnoozed || s == StatusClosed
}

// Conversation belongs to one account; its participants are user ids of
// that account.
type Conversation struct {
	ID            string     `json:"id"`
	AccountID     string     `json:"-"`
	Subject       string     `json:"subject"`
	Status        Status     `json:"status"`
	Participants  []string   `json:"participants"`
	CreatedAt     time.Time  `json:"createdAt"`
	UpdatedAt     time.Time  `json:"updatedAt"`
	LastMessageAt *time.Time `json:"lastMessageAt"`
}

// Limits of the contract (section 4).
const (
	MaxSubjectLen      = 300
	MaxParticipants    = 100
	MaxParticipantLen  = 128
	DefaultPageSize    = 10
	MaxPageSize        = 100
	MaxConversationLen = 32 << 10 // request body limit of POST
)

// Position is a point in the listing order (updatedAt descending, then id
// descending): a page continues with the conversations strictly after it.
type Position struct {
	UpdatedAt time.Time
	ID        string
}

// ListQuery selects a page of the conversations of one participant in one
// account.
type ListQuery struct {
	AccountID   string
	Participant string
	Status      Status    // "" means any status
	Limit       int       // 1..MaxPageSize
	After       *Position // nil means the first page
}

// Page is one page of a listing. Next is set when more conversations follow.
type Page struct {
	Conversations []Conversation
	Next          *Position
}

// Store persists conversations. Every method is scoped by account and
// participant: a conversation of another account, or one the caller does
// not take part in, behaves as if it did not exist.
type Store interface {
	CreateConversation(ctx context.Context, c Conversation) (Conversation, error)
	GetConversation(ctx context.Context, accountID, participant, id string) (Conversation, error)
	ListConversations(ctx context.Context, q ListQuery) (Page, error)
}
