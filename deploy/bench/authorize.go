package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// benchRedirectURI is the bench app's redirect URI: no server answers it,
// the bench reads the code from the redirect's Location.
const benchRedirectURI = "http://127.0.0.1/bench-callback"

// authorizationCodeRows measures the authorization code flow with PKCE as
// a browser and its app run it, over loopback: the full flow of a browser
// without a session (GET /oauth2/authorize, the sign-in page, its form
// submitted, the redirect with the code, POST /oauth2/token) against its
// floor (argon2id verification + the three signatures of the token set);
// and a single sign-on (the browser's session present: GET
// /oauth2/authorize redirects with a code at once, then POST
// /oauth2/token) against a client_credentials token sent by the same Go
// client, at the same concurrency on the same cores.
func authorizationCodeRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	appID, err := s.createPublicClient(ctx, benchRedirectURI)
	if err != nil {
		return nil, err
	}
	_, floor, params, err := s.signInFloor(ctx)
	if err != nil {
		return nil, err
	}
	transport := loopbackClient(o.workers).Transport
	newBrowser := func(w int) *benchBrowser {
		jar, _ := cookiejar.New(nil)
		name, password := benchUser(w)
		return &benchBrowser{
			client: &http.Client{Transport: transport, Jar: jar, Timeout: 30 * time.Second,
				CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }},
			accountURL: s.accountURL, clientID: appID, username: name, password: password,
		}
	}
	full := func(ctx context.Context, w int) error { return newBrowser(w).signIn(ctx) }
	// Each single sign-on worker is a browser that signed in once.
	browsers := make([]*benchBrowser, o.workers)
	for w := range browsers {
		browsers[w] = newBrowser(w)
		if err := browsers[w].signIn(ctx); err != nil {
			return nil, fmt.Errorf("authorization code: %w", err)
		}
	}
	sso := func(ctx context.Context, w int) error { return browsers[w].singleSignOn(ctx) }
	id, secret, err := s.createClient(ctx, benchClientScope)
	if err != nil {
		return nil, err
	}
	goClient := &http.Client{Transport: transport, Timeout: 30 * time.Second}
	form := url.Values{"grant_type": {"client_credentials"}}.Encode()
	clientToken := func(ctx context.Context, _ int) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.accountURL+"/oauth2/token", strings.NewReader(form))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
		_, err = tokenResponse(goClient, req)
		return err
	}

	flowSides := []side{
		{name: "authorization code flow", workers: o.workers, op: full, cpu: s.account.CPUTime, commands: s.accountCommands},
		{name: "argon2id + 3 signatures", workers: o.workers, op: floor},
	}
	flows, err := alternate(ctx, o.rounds, o.serviceRun, flowSides...)
	if err != nil {
		return nil, fmt.Errorf("authorization code flow: %w", err)
	}
	ssoSides := []side{
		{name: "single sign-on + token", workers: o.workers, op: sso, cpu: s.account.CPUTime, commands: s.accountCommands},
		{name: "client_credentials token", workers: o.workers, op: clientToken, cpu: s.account.CPUTime, commands: s.accountCommands},
	}
	ssos, err := alternate(ctx, o.rounds, o.serviceRun, ssoSides...)
	if err != nil {
		return nil, fmt.Errorf("single sign-on: %w", err)
	}
	if err := s.profile(ctx, s.account, flowSides[0], "authorization-code"); err != nil {
		return nil, err
	}
	rate := func(s []sample, what string) string {
		return oneDecimal(medianOf(s, sample.perSecond)) + " " + what + "/s"
	}
	vsFloor := ratios(flows[0], flows[1], throughputRatio)
	vsClient := ratios(ssos[0], ssos[1], throughputRatio)
	title := fmt.Sprintf("Authorization code flow with PKCE (%s keys), %d concurrent", o.signingAlg, o.workers)
	return []row{
		{
			measure: title + ": authorize → sign-in page → form submitted → redirect → token, vs argon2id + the 3 token signatures",
			subject: rate(flows[0], "sign-ins"),
			against: rate(flows[1], "floors") + " (" + params + " + 3 × " + o.signingAlg + " sign)",
			ratio:   vsFloor, unit: "× floor", target: "≥ 0.80", hasGoal: true, met: vsFloor.median >= 0.80, id: "authorization-code",
			cmds: cmdsCell(flows[0], flows[1]),
		},
		{
			measure: title + ": single sign-on (session present) authorize → redirect → token, vs a client_credentials token",
			subject: rate(ssos[0], "sign-ins"),
			against: rate(ssos[1], "tokens") + " (POST /oauth2/token, client_credentials, from the same Go client)",
			ratio:   vsClient, unit: "× client_credentials", target: "≥ 0.90", hasGoal: true, met: vsClient.median >= 0.90, id: "authorization-code",
			cmds: cmdsCell(ssos[0], ssos[1]),
		},
	}, nil
}

// createPublicClient registers a public client of the bench account with
// one redirect URI (the account binary's operator command) and returns
// its id.
func (s *stack) createPublicClient(ctx context.Context, redirectURI string) (string, error) {
	out, err := runTool(ctx, filepath.Join(s.bin, "account"), s.accountEnv, "",
		"create-client", "--account", benchAccount, "--name", fmt.Sprintf("bench-app-%d", time.Now().UnixNano()),
		"--public", "--redirect-uri", redirectURI)
	if err != nil {
		return "", err
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "client_id: "); ok {
			return strings.TrimSpace(v), nil
		}
	}
	return "", fmt.Errorf("create-client --public printed no client_id:\n%s", out)
}

// benchBrowser is one browser (its cookies) of a bench user, signing in to
// the bench app.
type benchBrowser struct {
	client               *http.Client
	accountURL, clientID string
	username, password   string
}

// signIn runs the flow of a browser without a session: the authorization
// request shows the sign-in page, whose form is submitted; its redirect
// carries the code, which the app redeems.
func (b *benchBrowser) signIn(ctx context.Context) error {
	verifier, res, err := b.authorize(ctx)
	if err != nil {
		return err
	}
	page, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("authorization without a session answered %d, not the sign-in page", res.StatusCode)
	}
	action, fields, err := signInForm(res.Request.URL, string(page))
	if err != nil {
		return err
	}
	fields.Set("accountName", benchAccount)
	fields.Set("username", b.username)
	fields.Set("password", b.password)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, action.String(), strings.NewReader(fields.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", b.accountURL)
	res, err = b.client.Do(req)
	if err != nil {
		return err
	}
	return b.redeem(ctx, res, verifier)
}

// singleSignOn runs an authorization request of a browser with a session:
// it redirects with a code at once, which the app redeems.
func (b *benchBrowser) singleSignOn(ctx context.Context) error {
	verifier, res, err := b.authorize(ctx)
	if err != nil {
		return err
	}
	return b.redeem(ctx, res, verifier)
}

// authorize sends an authorization request with a new PKCE verifier.
func (b *benchBrowser) authorize(ctx context.Context) (verifier string, res *http.Response, err error) {
	verifier = rand.Text() + rand.Text()
	challenge := sha256.Sum256([]byte(verifier))
	q := url.Values{
		"response_type": {"code"}, "client_id": {b.clientID}, "redirect_uri": {benchRedirectURI}, "scope": {"openid"},
		"state": {rand.Text()}, "nonce": {rand.Text()},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(challenge[:])}, "code_challenge_method": {"S256"},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.accountURL+"/oauth2/authorize?"+q.Encode(), nil)
	if err != nil {
		return "", nil, err
	}
	res, err = b.client.Do(req)
	return verifier, res, err
}

// redeem follows res's redirects within the account service to the
// redirect URI and redeems its code at the token endpoint.
func (b *benchBrowser) redeem(ctx context.Context, res *http.Response, verifier string) error {
	for hops := 0; ; hops++ {
		_, _ = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusFound && res.StatusCode != http.StatusSeeOther {
			return fmt.Errorf("%s %s answered %d, not a redirect", res.Request.Method, res.Request.URL.Path, res.StatusCode)
		}
		loc, err := res.Request.URL.Parse(res.Header.Get("Location"))
		if err != nil {
			return err
		}
		if strings.HasPrefix(loc.String(), benchRedirectURI+"?") {
			code := loc.Query().Get("code")
			if code == "" {
				return fmt.Errorf("redirected without a code: %s", loc.RawQuery)
			}
			form := url.Values{"grant_type": {"authorization_code"}, "code": {code}, "redirect_uri": {benchRedirectURI},
				"client_id": {b.clientID}, "code_verifier": {verifier}}
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.accountURL+"/oauth2/token", strings.NewReader(form.Encode()))
			if err != nil {
				return err
			}
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			_, err = tokenResponse(b.client, req)
			return err
		}
		if hops == 5 {
			return errors.New("more than 5 redirects within the account service")
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, loc.String(), nil)
		if err != nil {
			return err
		}
		if res, err = b.client.Do(req); err != nil {
			return err
		}
	}
}

// tokenResponse sends a token request and checks the answer is a token.
func tokenResponse(c *http.Client, req *http.Request) (accessToken string, err error) {
	status, body, err := do(c, req)
	if err != nil {
		return "", err
	}
	var resp struct {
		AccessToken string `json:"access_token"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &resp) != nil || resp.AccessToken == "" {
		return "", fmt.Errorf("token endpoint answered %d: %s", status, body)
	}
	return resp.AccessToken, nil
}

var (
	formTag     = regexp.MustCompile(`(?is)<form\b[^>]*>`)
	inputTag    = regexp.MustCompile(`(?is)<input\b[^>]*>`)
	attrPattern = regexp.MustCompile(`(?is)\s([a-z-]+)\s*=\s*"([^"]*)"`)
)

// signInForm reads the sign-in page's form: its action (resolved against
// the page's URL) and its hidden fields (the CSRF token among them).
func signInForm(page *url.URL, doc string) (*url.URL, url.Values, error) {
	tag := formTag.FindString(doc)
	if tag == "" {
		return nil, nil, errors.New("the sign-in page has no form")
	}
	action, err := page.Parse(attrs(tag)["action"])
	if err != nil {
		return nil, nil, err
	}
	fields := url.Values{}
	for _, input := range inputTag.FindAllString(doc, -1) {
		if a := attrs(input); strings.EqualFold(a["type"], "hidden") {
			fields.Add(a["name"], a["value"])
		}
	}
	return action, fields, nil
}

func attrs(tag string) map[string]string {
	m := map[string]string{}
	for _, a := range attrPattern.FindAllStringSubmatch(tag, -1) {
		m[strings.ToLower(a[1])] = html.UnescapeString(a[2])
	}
	return m
}
