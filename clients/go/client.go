package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
)

const (
	// DefaultTimeout is the timeout of the HTTP client used when
	// Config.HTTPClient is nil.
	DefaultTimeout = 10 * time.Second

	// MaxBodyBytes caps every response body the client reads. A successful
	// response with a larger body is an error.
	MaxBodyBytes = 4 << 20

	// renewTimeout bounds one renewal (refresh and, if needed, login), which
	// runs detached from the context of the call that started it.
	renewTimeout = 30 * time.Second

	userAgent = "acme-platform-client/1"
)

// Credentials are those of the user the client acts for. They print with the
// password redacted (fmt verbs %v, %+v and %#v, and log/slog).
type Credentials struct {
	AccountName string
	Username    string
	Password    string
}

// String implements fmt.Stringer without the password.
func (c Credentials) String() string {
	return fmt.Sprintf("{AccountName:%s Username:%s Password:[redacted]}", c.AccountName, c.Username)
}

// GoString implements fmt.GoStringer without the password.
func (c Credentials) GoString() string {
	return fmt.Sprintf("client.Credentials{AccountName:%q, Username:%q, Password:\"[redacted]\"}", c.AccountName, c.Username)
}

// LogValue implements slog.LogValuer without the password.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.String("accountName", c.AccountName), slog.String("username", c.Username))
}

// Config configures a Client.
type Config struct {
	// AccountURL is the base URL of the account service, e.g.
	// "http://localhost:8080". Required.
	AccountURL string
	// ConversationsURL is the base URL of the conversations service, e.g.
	// "http://localhost:8081". It may carry a path prefix (a gateway); the
	// API paths (/v1/...) and the service's next links are appended to it.
	// Optional: the conversation methods fail when it is empty.
	ConversationsURL string
	// HTTPClient sends the requests; nil means a client with a timeout of
	// DefaultTimeout.
	HTTPClient *http.Client
	// Credentials of the user to log in as. Give either Credentials or
	// ClientCredentials, not both.
	Credentials Credentials
	// ClientCredentials of the service client to act as (the OAuth 2.0
	// client-credentials grant, for backends that call the services on
	// their own behalf). Give either Credentials or ClientCredentials.
	ClientCredentials ClientCredentials
	// Now is the clock that decides when tokens need renewing; nil means
	// time.Now.
	Now func() time.Time
	// MaxRetries is how many times a read (GET), or a creation with its
	// Idempotency-Key, is sent again after a network failure, a 502, 503
	// or 504, or a 429: 0 means DefaultMaxRetries, a negative number none.
	// See "Retries" in the top-level README: every client of this
	// repository has this policy.
	MaxRetries int
	// MaxRetryWait is the longest wait before a retry: an answer whose
	// Retry-After asks for longer is returned at once. 0 means
	// DefaultMaxRetryWait.
	MaxRetryWait time.Duration
}

const (
	// DefaultMaxRetries is Config.MaxRetries when it is 0.
	DefaultMaxRetries = 2
	// DefaultMaxRetryWait is Config.MaxRetryWait when it is 0.
	DefaultMaxRetryWait = 10 * time.Second
	// firstRetryWait is the wait before the first retry when the answer
	// names none; it doubles with each retry.
	firstRetryWait = 250 * time.Millisecond
)

// Client calls the account and conversations services as one user, or as
// one service client. It is safe for concurrent use.
type Client struct {
	accountURL *url.URL
	convURL    *url.URL // nil when not configured
	http       *http.Client
	creds      Credentials
	client     ClientCredentials // ClientID is "" in user mode
	now        func() time.Time
	maxRetries int
	maxWait    time.Duration

	mu     sync.Mutex
	tokens *tokenSet // nil before the first login
	gen    uint64    // incremented whenever tokens is replaced
	stale  bool      // a service rejected the tokens of generation gen
	flight *flight   // the renewal in progress, if any
}

// New returns a client for cfg. It sends no request; see Client.Login.
func New(cfg Config) (*Client, error) {
	acc, err := parseBaseURL("AccountURL", cfg.AccountURL)
	if err != nil {
		return nil, err
	}
	if acc == nil {
		return nil, errors.New("client: Config.AccountURL is required")
	}
	conv, err := parseBaseURL("ConversationsURL", cfg.ConversationsURL)
	if err != nil {
		return nil, err
	}
	if err := checkCredentials(cfg.Credentials, cfg.ClientCredentials); err != nil {
		return nil, err
	}
	c := &Client{accountURL: acc, convURL: conv, http: cfg.HTTPClient, creds: cfg.Credentials, client: cfg.ClientCredentials, now: cfg.Now}
	c.client.Scopes = append([]string(nil), cfg.ClientCredentials.Scopes...)
	if c.http == nil {
		c.http = &http.Client{Timeout: DefaultTimeout}
	}
	if c.now == nil {
		c.now = time.Now
	}
	c.maxRetries, c.maxWait = cfg.MaxRetries, cfg.MaxRetryWait
	switch {
	case c.maxRetries == 0:
		c.maxRetries = DefaultMaxRetries
	case c.maxRetries < 0:
		c.maxRetries = 0
	}
	if c.maxWait <= 0 {
		c.maxWait = DefaultMaxRetryWait
	}
	return c, nil
}

// checkCredentials requires exactly one complete set of credentials. The
// errors name the missing field, never a value.
func checkCredentials(user Credentials, svc ClientCredentials) error {
	userSet := user != (Credentials{})
	svcSet := svc.ClientID != "" || svc.ClientSecret != "" || len(svc.Scopes) > 0
	switch {
	case userSet && svcSet:
		return errors.New("client: give either Config.Credentials or Config.ClientCredentials, not both")
	case !userSet && !svcSet:
		return errors.New("client: Config.Credentials (of a user) or Config.ClientCredentials (of a service client) is required")
	case svcSet:
		switch {
		case svc.ClientID == "":
			return errors.New("client: Config.ClientCredentials.ClientID is required")
		case svc.ClientSecret == "":
			return errors.New("client: Config.ClientCredentials.ClientSecret is required")
		}
		for _, s := range svc.Scopes {
			if !validScope(s) {
				return fmt.Errorf("client: Config.ClientCredentials.Scopes: %q is not a scope token (RFC 6749 section 3.3)", s)
			}
		}
		return nil
	}
	switch {
	case user.AccountName == "":
		return errors.New("client: Config.Credentials.AccountName is required")
	case user.Username == "":
		return errors.New("client: Config.Credentials.Username is required")
	case user.Password == "":
		return errors.New("client: Config.Credentials.Password is required")
	}
	return nil
}

// parseBaseURL checks a configured base URL and drops its trailing slash; an
// empty string gives nil.
func parseBaseURL(name, raw string) (*url.URL, error) {
	if raw == "" {
		return nil, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a password
		}
		return nil, fmt.Errorf("client: Config.%s: %w", name, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("client: Config.%s: want an absolute http or https URL, such as http://localhost:8080", name)
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("client: Config.%s: want a base URL without user info, query or fragment", name)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	u.RawPath = strings.TrimSuffix(u.RawPath, "/")
	return u, nil
}

// retryWait says whether a request that failed with err after retries
// retries may be sent again, and after how long: for a 429, 502, 503 or 504
// its Retry-After (else 250 ms, doubling), and for a failure with no answer
// (the connection refused or reset, a timeout of the HTTP client) the
// doubling wait; never when the caller's context ended, and never beyond
// maxRetries retries or a wait over maxWait.
func (c *Client) retryWait(ctx context.Context, err error, retries int) (time.Duration, bool) {
	if retries >= c.maxRetries || ctx.Err() != nil {
		return 0, false
	}
	backoff := firstRetryWait << retries
	var e *Error
	var o *OAuthError
	var status int
	var retryAfter time.Duration
	switch {
	case errors.As(err, &e):
		status, retryAfter = e.Status, e.RetryAfter
	case errors.As(err, &o):
		status, retryAfter = o.Status, o.RetryAfter
	case errors.Is(err, ErrBodyTooLarge):
		return 0, false
	default:
		var ne net.Error
		var oe *net.OpError
		if errors.As(err, &ne) || errors.As(err, &oe) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return backoff, backoff <= c.maxWait
		}
		return 0, false
	}
	switch status {
	case http.StatusTooManyRequests, http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
	default:
		return 0, false
	}
	wait := backoff
	if retryAfter > 0 {
		wait = retryAfter
	}
	return wait, wait <= c.maxWait
}

// endpoint is base with escapedPath (which starts with "/") appended to its
// path.
func endpoint(base *url.URL, escapedPath string) (*url.URL, error) {
	u, err := url.Parse(base.String() + escapedPath)
	if err != nil {
		return nil, fmt.Errorf("client: build URL: %w", err)
	}
	return u, nil
}

// request is one HTTP exchange with a body (or none).
type request struct {
	method string
	url    *url.URL
	body   []byte // nil for none
	// contentType of body; "" means application/json.
	contentType string
	// header holds further request header fields (If-Match,
	// Idempotency-Key, a Basic Authorization).
	header http.Header
	bearer string
	// oauth: the endpoint answers errors in the form of RFC 6749 section
	// 5.2 rather than as problems.
	oauth bool
}

// exchange sends r and reads the response body (at most MaxBodyBytes). A
// status outside 2xx gives an *Error (an *OAuthError for an RFC 6749 error
// body).
func (c *Client) exchange(ctx context.Context, r request) (http.Header, []byte, error) {
	var body io.Reader = http.NoBody
	if r.body != nil {
		// A *bytes.Reader lets net/http set GetBody, so the transport may
		// replay the request on a connection that turns out to be dead:
		// only idempotent ones, i.e. also POSTs with an Idempotency-Key.
		body = bytes.NewReader(r.body)
	}
	req, err := http.NewRequestWithContext(ctx, r.method, r.url.String(), body)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: %w", r.method, r.url.Path, err)
	}
	for k, v := range r.header {
		req.Header[k] = v
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", userAgent)
	if r.body != nil {
		ct := r.contentType
		if ct == "" {
			ct = "application/json"
		}
		req.Header.Set("Content-Type", ct)
	}
	if r.bearer != "" {
		req.Header.Set("Authorization", "Bearer "+r.bearer)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		// *url.Error repeats the whole URL; the path is enough.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, fmt.Errorf("client: %s %s: %w", r.method, r.url.Path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, MaxBodyBytes+1))
	tooLarge := len(data) > MaxBodyBytes
	if tooLarge {
		data = data[:MaxBodyBytes]
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		// A truncated or partly read error body still says what it can.
		return resp.Header, nil, newError(r, resp, data, c.now())
	}
	if err != nil {
		return nil, nil, fmt.Errorf("client: %s %s: read response body: %w", r.method, r.url.Path, err)
	}
	if tooLarge {
		return nil, nil, fmt.Errorf("client: %s %s: %w", r.method, r.url.Path, ErrBodyTooLarge)
	}
	return resp.Header, data, nil
}

// ErrBodyTooLarge is returned (wrapped) for a successful response whose body
// exceeds MaxBodyBytes.
var ErrBodyTooLarge = fmt.Errorf("response body exceeds %d bytes", MaxBodyBytes)

// call sends the authenticated request r with in (unless nil) encoded as
// its JSON body, decodes the JSON response into out (unless nil) and returns
// the response headers. On a 401 invalid_token it renews the session once
// and retries once, with the same body and header fields (so the same
// Idempotency-Key). A read (GET), or a request with an Idempotency-Key, is
// also sent again after a network failure or a 429, 502, 503 or 504, up to
// maxRetries times, waiting Retry-After (else 250 ms, doubling) unless that
// exceeds maxWait.
func (c *Client) call(ctx context.Context, r request, in, out any) (http.Header, error) {
	if in != nil {
		var err error
		if r.body, err = json.Marshal(in); err != nil {
			return nil, fmt.Errorf("client: %s %s: encode request: %w", r.method, r.url.Path, err)
		}
	}
	retryable := r.method == http.MethodGet || r.header.Get("Idempotency-Key") != ""
	renewed := false
	for retries := 0; ; {
		bearer, gen, err := c.bearer(ctx)
		if err != nil {
			return nil, err
		}
		r.bearer = bearer
		h, data, err := c.exchange(ctx, r)
		var e *Error
		if !renewed && errors.As(err, &e) && e.Status == http.StatusUnauthorized && e.Code == CodeInvalidToken {
			renewed = true
			c.invalidate(gen)
			continue
		}
		if err != nil {
			wait, again := c.retryWait(ctx, err, retries)
			if !retryable || !again {
				return nil, err
			}
			retries++
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
			continue
		}
		if out != nil {
			if err := json.Unmarshal(data, out); err != nil {
				return nil, fmt.Errorf("client: %s %s: decode response: %w", r.method, r.url.Path, err)
			}
		}
		return h, nil
	}
}
