// Package cursor makes the opaque paging cursors of GET /v1/conversations
// and GET /v1/conversations/{id}/messages.
//
// A cursor is the listing position (time, id) of the last item of a page,
// authenticated with HMAC-SHA256 under a secret shared by all replicas. The
// MAC also covers the query the cursor belongs to (account, caller and the
// kind of caller, and the status and updatedAfter filters of a
// conversation listing, or the conversation of a message listing), so a
// cursor whose bytes were altered, or one used by another user or service
// client, with another filter or in another listing, is refused rather
// than silently listing something else. Cursors carry no
// expiry: a position stays a valid place to continue from.
package cursor

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/acme/platform/services/conversations"
)

// ErrInvalid is returned for every cursor that cannot be used; callers map
// it to a 400. It never says which check failed.
var ErrInvalid = errors.New("invalid cursor")

// MinKeyLen is the shortest secret accepted.
const MinKeyLen = 32

const (
	version = 1
	macLen  = 16 // 128-bit truncated HMAC: forging one needs ~2^128 tries
	// maxLen bounds the input before any decoding work.
	maxLen = 512
)

// Scope is what a cursor is bound to: the query it continues.
type Scope struct {
	AccountID string
	// Participant is the caller: the user id, or the client id when
	// Client is set.
	Participant string
	// Client marks a service client's listing: account-wide for
	// conversations. It is bound into the MAC with
	// a label of its own, so that a user's cursor is never one of an
	// account-wide listing, or the other way round.
	Client bool
	// Status and UpdatedAfter are the filters of a conversation listing
	// ("" when absent; UpdatedAfter as given to the store, e.g. Unix
	// milliseconds).
	Status       string
	UpdatedAfter string
	// ConversationID is set for a message listing: that conversation's.
	ConversationID string
	// Listing names a listing of another kind (webhook endpoints, an
	// endpoint's deliveries); ParentID is the resource it lists under.
	Listing  string
	ParentID string
}

// fields are the MAC's inputs for the scope. A listing of conversations
// without updatedAfter has the fields it had before that filter existed,
// so cursors handed out then stay valid; each kind of listing starts with
// its own label, so no cursor of one kind is one of another. Users'
// listings keep the labels they had before service clients existed.
func (s Scope) fields() []string {
	messages, conversations := "messages-cursor", "conversations-cursor"
	if s.Client {
		messages, conversations = "client-messages-cursor", "account-conversations-cursor"
	}
	if s.Listing != "" {
		return []string{s.Listing + "-cursor", s.AccountID, s.Participant, s.ParentID}
	}
	if s.ConversationID != "" {
		return []string{messages, s.AccountID, s.Participant, s.ConversationID}
	}
	f := []string{conversations, s.AccountID, s.Participant, s.Status}
	if s.UpdatedAfter != "" {
		f = append(f, "updated-after", s.UpdatedAfter)
	}
	return f
}

// Codec encodes and decodes cursors under one secret.
type Codec struct {
	key []byte
}

// New returns a Codec for key (at least MinKeyLen bytes).
func New(key []byte) (*Codec, error) {
	if len(key) < MinKeyLen {
		return nil, fmt.Errorf("cursor key must be at least %d bytes, got %d", MinKeyLen, len(key))
	}
	return &Codec{key: append([]byte(nil), key...)}, nil
}

// Encode returns the cursor for pos within scope.
func (c *Codec) Encode(scope Scope, pos conversations.Position) string {
	payload := make([]byte, 0, 9+len(pos.ID)+macLen)
	payload = append(payload, version)
	payload = binary.BigEndian.AppendUint64(payload, uint64(pos.Time.UnixMilli()))
	payload = append(payload, pos.ID...)
	payload = append(payload, c.mac(scope, payload)...)
	return base64.RawURLEncoding.EncodeToString(payload)
}

// Decode returns the position of cursor s within scope, or ErrInvalid.
func (c *Codec) Decode(scope Scope, s string) (conversations.Position, error) {
	// Base64 decoding skips CR and LF, even in strict mode: refuse them,
	// so that a position has exactly one cursor.
	if len(s) == 0 || len(s) > maxLen || strings.ContainsAny(s, "\r\n") {
		return conversations.Position{}, ErrInvalid
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(raw) < 1+8+1+macLen || raw[0] != version {
		return conversations.Position{}, ErrInvalid
	}
	payload, sum := raw[:len(raw)-macLen], raw[len(raw)-macLen:]
	if !hmac.Equal(sum, c.mac(scope, payload)) {
		return conversations.Position{}, ErrInvalid
	}
	ms := int64(binary.BigEndian.Uint64(payload[1:9]))
	return conversations.Position{Time: time.UnixMilli(ms).UTC(), ID: string(payload[9:])}, nil
}

// mac authenticates payload together with the scope. Fields are length-
// prefixed so that no two different scopes share an encoding.
func (c *Codec) mac(scope Scope, payload []byte) []byte {
	h := hmac.New(sha256.New, c.key)
	for _, f := range scope.fields() {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	h.Write(payload)
	return h.Sum(nil)[:macLen]
}
