// Package client is the Go client of the account and conversations services,
// for backends that call them on behalf of one user, or on their own behalf
// as a service client.
//
// A [Client] holds the credentials of one user, logs in at the account
// service and sends the id token of the session as the bearer token of every
// call, on both services:
//
//	c, err := client.New(client.Config{
//		AccountURL:       "http://localhost:8080",
//		ConversationsURL: "http://localhost:8081",
//		Credentials:      client.Credentials{AccountName: "acme", Username: "alice", Password: pw},
//	})
//	if err != nil { ... }
//	if err := c.Login(ctx); client.IsCode(err, client.CodeInvalidCredentials) { ... }
//	for conv, err := range c.Conversations(ctx, client.ListOptions{Limit: 50}) { ... }
//
// A Client is safe for concurrent use; create one per user and keep it.
//
// # Service clients
//
// A backend acting on its own behalf uses the client id and secret an
// operator created for it instead ([ClientCredentials]; no user, no
// password):
//
//	c, err := client.New(client.Config{
//		AccountURL:        "http://localhost:8080",
//		ConversationsURL:  "http://localhost:8081",
//		ClientCredentials: client.ClientCredentials{ClientID: id, ClientSecret: secret},
//	})
//
// The client then obtains access tokens with the OAuth 2.0 client-credentials
// grant (POST /oauth2/token, form-encoded, the client authenticated with HTTP
// Basic: client_secret_basic), optionally narrowed to
// ClientCredentials.Scopes, and renews them before they expire as it renews a
// user's session (there is no refresh token: it asks again). The token
// endpoint answers errors in the form of RFC 6749 section 5.2; they become an
// [*OAuthError] (IsCode(err, CodeInvalidClient), errors.Is(err,
// ErrInvalidScope)). A call the token's scopes do not allow is an *Error with
// the code insufficient_scope. A service client sees every conversation of
// its account, not only those it takes part in.
//
// # Second factor
//
// A user with a TOTP second factor cannot log in with the password alone:
// a call that logs in fails with [ErrMFARequired]; ask the user for a code
// and call [Client.LoginWithOTP] (a current code or an unused recovery
// code, each accepted once). [Client.EnrollTOTP], [Client.VerifyTOTP] and
// [Client.RemoveTOTP] manage the user's own factor;
// [Client.ResetUserMFA] removes a user's for a backend.
//
// # Session
//
// [Client.Login] logs in (POST /login) and stores the token set; calling it is
// optional, since the first call that needs a token logs in by itself. Before
// each call the client checks the expiry of the id token: once it expires
// within a margin (60 s, or a tenth of its lifetime when that is smaller),
// the client obtains a new token set first. It tries POST /token/refresh with
// the refresh token, and logs in again with the credentials when that
// endpoint answers 401 (the refresh token is spent or revoked) or 404 (the
// endpoint is not deployed). Concurrent calls share one renewal: one request
// renews, the others wait for it and use its result. A renewal runs detached
// from the context of the call that started it (bounded by its own timeout),
// so that one caller giving up does not fail the others.
//
// When a service nevertheless rejects the token (401 invalid_token: a key
// rotation, a revoked session, a clock far off), the client renews once and
// retries the call once. Reads (GET), and creations with their
// Idempotency-Key, are also sent again after a network failure, a 502, 503
// or 504, or a 429 whose Retry-After is at most Config.MaxRetryWait (10 s
// by default), at most Config.MaxRetries times (2 by default), waiting
// Retry-After, else 250 ms, 500 ms, …: the policy of every client of this
// repository ("Retries" in the top-level README). Patches and participant
// changes are never retried; an error that remains is returned as an
// [*Error] whose RetryAfter says when to try again.
//
// # Paging
//
// [Client.Conversations] iterates over every conversation of the caller,
// following the RFC 8288 Link header with rel="next" page after page;
// [Client.ListConversationsPage] returns one page at a time for callers that
// keep the position themselves. [Client.Messages] and
// [Client.ListMessagesPage] do the same for the messages of a conversation,
// newest first. A next link is taken relative to the configured
// ConversationsURL, and the client never follows one to another origin (it
// would send the bearer token there). ListOptions.UpdatedAfter lists only the
// conversations changed since an instant, for clients that sync.
//
// # Events
//
// Every change of a conversation is an [Event] (its Type one of the
// Event… constants), ordered per account by Sequence. [Client.Events]
// returns the feed from a stored position (or [FromOldest]); ranging over
// [EventFeed.All] reads it until it has caught up, and
// [EventFeed.Position] is where to continue next time, to get every later
// event exactly once. [Client.ListEventsPage] returns one page and the
// position to continue from, which moves past events the caller may not
// see. [Client.FollowEvents]
// follows the live stream (Server-Sent Events) and reconnects with
// Last-Event-ID and a fresh token whenever the stream ends, so no event is
// skipped or repeated; a token the service refuses when it reconnects is
// renewed once, and a second refusal ends it with [ErrInvalidToken]. A
// position older than the service keeps events (30 days) is refused with
// [ErrCursorExpired]: resynchronise with ListOptions.UpdatedAfter.
//
// # Messages and the lifecycle of a conversation
//
// [Client.PostMessage] posts a message (which reopens a snoozed conversation,
// and is refused with ErrConversationClosed by a closed one),
// [Client.GetMessage] reads one. [Client.PatchConversation] changes the
// subject or the status with a JSON merge patch, and
// [Client.AddParticipant] and [Client.RemoveParticipant] change the
// participants one at a time.
//
// Changes are optimistic: every conversation the client reads from a single
// resource (create, get, patch) carries the entity tag of that response in
// Conversation.ETag, and PatchConversation sends it as If-Match. The tag
// travels with the value, not inside the Client, so that each caller changes
// the state it saw: when someone else changed the conversation since, the
// service refuses with 412 and the code precondition_failed
// (errors.Is(err, ErrPreconditionFailed)) and nothing changes; get it again
// and retry. Listings carry no tags, so PatchConversation of a listed value
// asks for a GetConversation first. The participant calls return the
// conversation's new tag and take [WithIfMatch] to be conditional too.
// Posting a message changes the conversation's tag as well; PostMessage
// with [WithConversation](&conv) reads it again into conv, so that a patch
// after a message is conditional on the state after it.
//
//	conv, err := c.GetConversation(ctx, id)
//	...
//	conv, err = c.PatchConversation(ctx, conv, client.ConversationPatch{Status: client.StatusClosed})
//	if errors.Is(err, client.ErrPreconditionFailed) { ... someone else was faster: get it again ... }
//
// # Idempotency
//
// [Client.CreateConversation] and [Client.PostMessage] send an
// Idempotency-Key, which the service remembers for 24 hours: a request it
// has seen with that key and body gets the first response again and creates
// nothing. The client generates a key per call, so its own retries (after a
// 401, and the transport's replay of a request whose connection died) cannot
// create twice. A caller that retries a call itself, say after a timeout
// whose outcome is unknown, gives every attempt the same key with
// [WithIdempotencyKey] (see [NewIdempotencyKey]); the same key with another
// body is refused with ErrIdempotencyKeyReused.
//
// # Errors
//
// Every answer outside 2xx becomes an [*Error], parsed from the RFC 9457
// problem body (application/problem+json) of the services: switch on its
// Code, with [IsCode] or errors.Is and the Err* sentinels, never on Title or
// Detail. A body that is not a problem (say, from a proxy) gives the Code
// "http_<status>". The OAuth 2.0 token endpoint answers in the form of RFC
// 6749 instead: an [*OAuthError], whose Code IsCode and errors.Is read alike.
// Network failures and undecodable bodies (JSON nested over 10,000 levels
// among them) are other errors, never a crash.
//
// # Secrets
//
// Neither the password, the client secret nor any token ever appears in an
// error, because the client never puts one there (an error keeps the
// method, the path and the service's answer, whose texts stay as the
// service wrote them), and [Credentials] and [ClientCredentials] print with
// the password and the secret redacted. Response bodies are read up to [MaxBodyBytes].
//
// # Webhooks
//
// [VerifyWebhook] checks a delivery to a webhook endpoint and returns its
// event, the same [Event] the feed gives. README.md shows a receiver.
package client
