package http

import (
	"errors"
	"net/http"
	"time"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook"
)

// Problem codes of this service, beside pkg/problem's.
const (
	codeConversationClosed   = "conversation_closed"
	codeTooManyParticipants  = "too_many_participants"
	codeLastParticipant      = "last_participant"
	codePreconditionFailed   = "precondition_failed"
	codeIdempotencyKeyReused = "idempotency_key_reused"
	codeCursorExpired        = "cursor_expired"
	codeTooManyEndpoints     = "too_many_endpoints"
)

// retryAfterStream is when a caller with too many streams, or one that
// met a stopping replica, should try again.
const retryAfterStream = 2 * time.Second

// problemFor is the one function that decides the status and code of
// every failed request of this service: the domain's errors get theirs
// here; everything else (problems of the plumbing, validation errors, an
// unreachable database, unknown routes) is decided by web.ProblemFor.
func problemFor(err error) *problem.Problem {
	var rateLimited *webhook.RateLimitedError
	switch {
	case errors.Is(err, webhook.ErrEndpointNotFound):
		return problem.NotFound("No webhook endpoint with this id in your account.")
	case errors.Is(err, webhook.ErrDeliveryNotFound):
		return problem.NotFound("No delivery with this id for this webhook endpoint.")
	case errors.Is(err, webhook.ErrTooManyEndpoints):
		return problem.New(http.StatusConflict, codeTooManyEndpoints,
			"The account has the largest number of webhook endpoints allowed: delete one first.")
	case errors.As(err, &rateLimited):
		return problem.TooManyRequests("Too many test or retry requests for this webhook endpoint; retry later.", rateLimited.RetryAfter)
	case errors.Is(err, conversations.ErrMessageNotFound):
		return problem.NotFound("No message with this id in this conversation.")
	case errors.Is(err, conversations.ErrNotFound):
		return problem.NotFound("No conversation with this id among yours.")
	case errors.Is(err, conversations.ErrConversationClosed):
		return problem.New(http.StatusConflict, codeConversationClosed,
			"The conversation is closed: reopen it (PATCH status open) to post messages.")
	case errors.Is(err, conversations.ErrTooManyParticipants):
		return problem.New(http.StatusConflict, codeTooManyParticipants,
			"The conversation already has the largest number of participants (100).")
	case errors.Is(err, conversations.ErrLastParticipant):
		return problem.New(http.StatusConflict, codeLastParticipant,
			"The last participant cannot be removed: a conversation has at least one.")
	case errors.Is(err, conversations.ErrPreconditionFailed):
		return problem.New(http.StatusPreconditionFailed, codePreconditionFailed,
			"The conversation changed since the ETag given in If-Match: read it again.")
	case errors.Is(err, conversations.ErrContended):
		return problem.New(http.StatusConflict, problem.CodeConflict,
			"The conversation is being changed by many requests at once; retry.")
	case errors.Is(err, conversations.ErrCursorExpired):
		return problem.New(http.StatusGone, codeCursorExpired,
			"Events after this position were purged: resynchronise with GET /v1/conversations?updatedAfter=, then follow the feed from its oldest kept event.")
	case errors.Is(err, conversations.ErrTooManyStreams):
		return problem.TooManyRequests("You have the largest number of open event streams (10): close one first.", retryAfterStream)
	case errors.Is(err, conversations.ErrShuttingDown):
		p := problem.New(http.StatusServiceUnavailable, problem.CodeUnavailable, "This replica is stopping; reconnect.")
		p.RetryAfter = retryAfterStream
		return p
	case errors.Is(err, conversations.ErrIdempotencyKeyReused):
		return problem.New(http.StatusUnprocessableEntity, codeIdempotencyKeyReused,
			"This Idempotency-Key was used with another request in the last 24 hours; use a new key.")
	}
	return web.ProblemFor(err)
}
