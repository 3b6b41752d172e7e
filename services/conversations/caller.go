package conversations

import "slices"

// Caller is who makes a request, as the verified bearer token says. It is
// the one place that decides which conversations a request may see and
// change (MayAccess, mirrored by the stores' query filter), whom a message
// it posts is by (Author), under which name its idempotency keys are kept
// (KeyOwner), and who takes part in a conversation it creates
// (NewConversation.Conversation).
//
// A caller is a user or a service client of the account. A user sees the
// conversations they take part in. A service client takes part in none and sees every conversation of its account; what it
// may do with them is limited by its token's scopes, which the HTTP layer
// checks per route before any of this runs.
type Caller struct {
	AccountID string
	// ID is the token's sub: the user id, or the client id of a service
	// client.
	ID string
	// Client is set for a service client's token.
	Client bool
}

// MayAccess reports whether the caller may see and change c: a
// conversation of the caller's account in which the caller takes part, or
// any conversation of its account for a service client. Stores express
// the same rule as a query filter.
func (who Caller) MayAccess(c Conversation) bool {
	return c.AccountID == who.AccountID && (who.Client || slices.Contains(c.Participants, who.ID))
}

// Author is the author recorded on a message the caller posts: the user
// id, or the client id.
func (who Caller) Author() string { return who.ID }

// KeyOwner is the name under which the caller's idempotency keys are kept
// within its account: the user id, or "client:" and the client id, so that
// a user and a service client never share keys even if their ids were
// equal.
func (who Caller) KeyOwner() string {
	if who.Client {
		return "client:" + who.ID
	}
	return who.ID
}
