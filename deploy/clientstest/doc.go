// Package clientstest proves the client libraries under clients/ against
// the real services: it starts the account and conversations binaries on a
// fresh database (the embedded store, or MONGODB_URI) and runs each library's
// own test files as subprocesses, each file against an account of its own
// with the endpoints and credentials in environment variables. No mock of our API is
// involved anywhere.
//
// The Go client's suite (goclient_*_test.go) runs in this process instead,
// on services of its own with long-lived tokens (it counts renewals), each
// test as a user of its own behind a recording proxy per service that
// checks every exchange against the OpenAPI documents (wire, in
// goclient_wire_test.go). The proxy injects only what the services cannot
// be made to do on demand, and each test that uses it says which: a slow
// renewal, a lost response, a token refused before it expires, a chosen
// expires_in, and stand-in answers the services never give (an account
// service without POST /token/refresh, 429/503 and gateway bodies, odd
// Link headers, incomplete token responses).
//
//	go test ./deploy/clientstest/...        # or: make test-clients
//	SKIP_CLIENTS=php,python make test       # leave clients out on a developer's machine
//
// # Adding a language
//
// One entry in the suites table (clients_test.go): its name (as used in
// SKIP_CLIENTS), its folder, the programs it needs with the Debian or npm
// package that provides each (a missing program fails the run with that
// package, it never skips), the commands that prepare it (npm ci and npm
// run build go through deploy/internal/npmcache, which keeps what they
// made between runs) and
// the glob of its test files and the command that runs one of them, in its
// folder. A file passes when its command exits 0.
//
// The suites, and every test file of each, run side by side (most of their
// time is spent waiting on token lifetimes, a browser or a venv); the
// output of each file is shown when it fails (and with -v).
//
// # Leaving a client out
//
// SKIP_CLIENTS is a comma-separated list of suite names (go, js, python, php)
// that are not run; each shows as skipped with the reason. An unknown name
// fails the run, so that a typo cannot leave a client out silently. CI never
// sets it.
//
// # The environment of a suite
//
// Every test file gets these variables (and the harness's own environment).
// Each file has an account of its own, so files never see each other's
// data, and a file may rely on the account being empty of conversations
// when it starts.
//
//	ACME_TEST_ACCOUNT_URL        base URL of the account service, e.g. http://127.0.0.1:40123 (no trailing slash)
//	ACME_TEST_CONVERSATIONS_URL  base URL of the conversations service
//	ACME_TEST_ACCOUNT_NAME       the file's account (suite and file, e.g. "python-test-session")
//	ACME_TEST_USERNAME           a user of that account …
//	ACME_TEST_PASSWORD           … and its password
//	ACME_TEST_USER_ID            … and its user id (the sub of its tokens, a conversation participant)
//	ACME_TEST_OTHER_USERNAME     a second user of the account (a participant to add, a non-participant for a 404)
//	ACME_TEST_OTHER_PASSWORD
//	ACME_TEST_OTHER_USER_ID
//	ACME_TEST_LOCKOUT_USERNAME   a third user the suite may lock out with five wrong passwords (429 + Retry-After);
//	ACME_TEST_LOCKOUT_PASSWORD   nothing else uses it
//	ACME_TEST_CLIENT_ID          a service client of the account (POST /oauth2/token, grant client_credentials) …
//	ACME_TEST_CLIENT_SECRET      … with every scope: definitions:read definitions:write conversations:read conversations:write users:read users:write
//	                             webhooks:manage; the conversations service delivers webhooks over plain http to
//	                             loopback (127.0.0.0/8, ::1), so a suite's receiver listens there
//	ACME_TEST_TOKEN_TTL          lifetime of id and access tokens in seconds (expires_in): a few seconds, so that
//	                             a suite sees its tokens renewed; refresh tokens live long
//	ACME_TEST_DEFINITION_NAME    the account holds exactly one integration definition, of this name …
//	ACME_TEST_DEFINITION_TYPE    … and this type
//	ACME_TEST_BROWSER_ORIGIN     an origin both services allow by CORS (http://127.0.0.1:PORT) whose port is free:
//	                             a browser test serves its page there, so that its calls are cross-origin
//	ACME_TEST_FAULT_PROXY_URL    the control endpoint of the one fault-injecting proxy of the suites (FaultProxy):
//	                             POST /proxies opens a proxy in front of a service that closes the connection
//	                             instead of answering the first N requests of a method and path prefix;
//	                             GET /proxies/{id} reports what it forwarded, DELETE /proxies/{id} closes it;
//	                             with "cutAfterEvents":N it streams the matching answers and closes the first
//	                             "drop" of them right after their N-th event instead (a live stream that breaks);
//	                             with "refuseTokens":N (and "refuseFrom":K, 0 the first) it breaks the bearer token
//	                             of N matching requests from the K-th, so that the service answers 401 invalid_token
//	                             as to an expired token; the report marks them "tokenRefused"
//
// The login throttle is the services' default: five wrong passwords of one
// user lock it for 15 minutes; a hundred failures from one address lock the
// address, so a suite should not spend more than a few dozen.
package clientstest
