package client

import (
	"crypto/rand"
	"fmt"
	"strings"
)

// MaxIdempotencyKeyLength is the longest Idempotency-Key the services
// accept.
const MaxIdempotencyKeyLength = 255

// A CallOption adjusts one write call: [WithIdempotencyKey] for
// [Client.CreateConversation] and [Client.PostMessage], [WithIfMatch] for
// [Client.AddParticipant] and [Client.RemoveParticipant]. A call given an
// option it does not take returns an error without sending anything.
type CallOption func(*callOptions)

type callOptions struct {
	idempotencyKey string
	hasKey         bool
	ifMatch        string
	hasIfMatch     bool
	conversation   *Conversation
}

// WithIdempotencyKey sends key as the Idempotency-Key of a create call
// instead of a key the client generates. Give every attempt of one logical
// call the same key, e.g. one from [NewIdempotencyKey]: the service then
// creates the resource once and answers every repeat (within 24 hours, by the
// same caller, with the same body) with the first response. The same key
// with another body is an *Error with the code idempotency_key_reused. A key
// is 1 to 255 printable ASCII characters.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.idempotencyKey, o.hasKey = key, true }
}

// WithIfMatch makes a participant change conditional on the conversation
// still having the entity tag etag (Conversation.ETag): when it changed in the
// meantime, the call fails with an *Error with the code precondition_failed
// (ErrPreconditionFailed) and changes nothing.
func WithIfMatch(etag string) CallOption {
	return func(o *callOptions) { o.ifMatch, o.hasIfMatch = etag, true }
}

// WithConversation makes [Client.PostMessage] keep conv current: a message
// changes its conversation, and so its ETag, which the message's answer does
// not carry; so after the message, when conv holds a tag (conv.ETag), the
// client reads the conversation again (one GET) into *conv. A
// PatchConversation(ctx, conv, ...) that follows is then conditional on the
// state after the message, as in every client of this repository. Should
// that read fail, the message stands and conv stays as it was: the patch
// then gets a 412 (ErrPreconditionFailed), never a silent overwrite.
func WithConversation(conv *Conversation) CallOption {
	return func(o *callOptions) { o.conversation = conv }
}

// NewIdempotencyKey returns a new random Idempotency-Key (128 bits from
// crypto/rand), for callers that retry a create call themselves and so must
// give each attempt the same key (WithIdempotencyKey).
func NewIdempotencyKey() string {
	return rand.Text()
}

// collectOptions applies opts for the call named op, refusing an option the
// call does not take.
func collectOptions(op string, opts []CallOption, takesKey, takesIfMatch bool) (callOptions, error) {
	var o callOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	switch {
	case o.hasKey && !takesKey:
		return o, fmt.Errorf("client: %s does not take an Idempotency-Key (only CreateConversation and PostMessage do)", op)
	case o.hasIfMatch && !takesIfMatch:
		return o, fmt.Errorf("client: %s does not take WithIfMatch", op)
	case o.conversation != nil && op != "PostMessage":
		return o, fmt.Errorf("client: %s does not take WithConversation (only PostMessage does)", op)
	}
	if o.hasKey {
		if err := checkIdempotencyKey(o.idempotencyKey); err != nil {
			return o, fmt.Errorf("client: %s: %w", op, err)
		}
	}
	if o.hasIfMatch {
		if err := checkETag(o.ifMatch); err != nil {
			return o, fmt.Errorf("client: %s: %w", op, err)
		}
	}
	return o, nil
}

// checkIdempotencyKey checks the contract's form: 1 to 255 printable ASCII
// characters, and no space at either end (a header field value loses those).
func checkIdempotencyKey(key string) error {
	if key == "" || len(key) > MaxIdempotencyKeyLength {
		return fmt.Errorf("invalid Idempotency-Key: want 1 to %d characters, have %d", MaxIdempotencyKeyLength, len(key))
	}
	for i := 0; i < len(key); i++ {
		if key[i] < 0x20 || key[i] > 0x7e {
			return fmt.Errorf("invalid Idempotency-Key: want printable ASCII, have byte %#x at offset %d", key[i], i)
		}
	}
	if strings.TrimSpace(key) != key {
		return fmt.Errorf("invalid Idempotency-Key: leading or trailing space")
	}
	return nil
}

// checkETag checks that etag can be sent as a header field value.
func checkETag(etag string) error {
	if etag == "" {
		return fmt.Errorf("empty entity tag")
	}
	for i := 0; i < len(etag); i++ {
		if etag[i] < 0x20 || etag[i] == 0x7f {
			return fmt.Errorf("invalid entity tag: control byte %#x at offset %d", etag[i], i)
		}
	}
	return nil
}
