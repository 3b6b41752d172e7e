// Package client is the Go client of the account and conversations services,
// for backends that call them on behalf of one user.
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
// retries the call once. No other call is retried: a 503 or 429 is returned
// as an [*Error] whose RetryAfter says when to try again.
//
// # Paging
//
// [Client.Conversations] iterates over every conversation of the caller,
// following the RFC 8288 Link header with rel="next" page after page;
// [Client.ListConversationsPage] returns one page at a time for callers that
// keep the position themselves. A next link is taken relative to the
// configured ConversationsURL, and the client never follows one to another
// origin (it would send the bearer token there).
//
// # Errors
//
// Every answer outside 2xx becomes an [*Error], parsed from the RFC 9457
// problem body (application/problem+json) of the services: switch on its
// Code, with [IsCode] or errors.Is and the Err* sentinels, never on Title or
// Detail. A body that is not a problem (say, from a proxy) gives the Code
// "http_<status>". Network failures and undecodable bodies are other errors.
//
// # Secrets
//
// Neither the password nor any token ever appears in an error, and
// [Credentials] print with the password redacted. Response bodies are read up
// to [MaxBodyBytes].
package client
