package http

import (
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/services/account"
)

// Sign-in for apps (docs/signin.md): GET /oauth2/authorize, the sign-in
// page it shows and POST /oauth2/signin that the page submits, GET and
// POST /oauth2/logout (RP-Initiated Logout). Each handler decodes, calls
// one use case of account.Authorizations and writes its answer: a
// redirect, or a page of html/template. Errors get their status from
// problemFor, like every other response, and are shown as a page: the
// browser's user reads them, not a program.

//go:embed pages
var pageFiles embed.FS

// pages are the templates of the sign-in, error and signed-out pages.
var pages = template.Must(template.ParseFS(pageFiles, "pages/*.html"))

// stylesheet is the pages' one stylesheet, served from this origin: the
// CSP allows no inline style or script.
var stylesheet, _ = pageFiles.ReadFile("pages/signin.css")

// Paths of the sign-in flow.
const (
	pathAuthorize  = "/oauth2/authorize"
	pathSignIn     = "/oauth2/signin"
	pathLogout     = "/oauth2/logout"
	pathStylesheet = "/oauth2/assets/signin.css"
)

// authorizeParams are the parameters of an authorization request, which
// the sign-in form carries back as hidden fields.
var authorizeParams = []string{"client_id", "redirect_uri", "response_type", "scope", "state", "nonce",
	"code_challenge", "code_challenge_method", "prompt", "max_age", "login_hint", "account_name"}

// errCSRF refuses a sign-in form without the token of this browser's
// CSRF cookie: sent from another site, another browser or an old page.
var errCSRF = errors.New("the sign-in form's CSRF token does not match this browser's")

// browserCookies names and sets the cookies of the flow: the browser
// session (single sign-on) and the CSRF token of the sign-in form. Over
// https both are Secure and __Host- prefixed (bound to this origin);
// both are HttpOnly and SameSite=Lax, so that the redirect back from an
// app (a top-level navigation) carries the session and no other site's
// request does.
type browserCookies struct {
	secure bool
}

func newBrowserCookies(issuerURL string) browserCookies {
	return browserCookies{secure: strings.HasPrefix(issuerURL, "https://")}
}

func (b browserCookies) name(base string) string {
	if b.secure {
		return "__Host-" + base
	}
	return base
}

func (b browserCookies) sessionName() string { return b.name("account_session") }
func (b browserCookies) csrfName() string    { return b.name("account_csrf") }

func (b browserCookies) set(c *echo.Context, name, value string, maxAge int) {
	c.SetCookie(&http.Cookie{Name: name, Value: value, Path: "/", MaxAge: maxAge, HttpOnly: true,
		Secure: b.secure, SameSite: http.SameSiteLaxMode})
}

// value is a cookie's value, "" when the request has none.
func (b browserCookies) value(c *echo.Context, name string) string {
	ck, err := c.Cookie(name)
	if err != nil {
		return ""
	}
	return ck.Value
}

// csrfToken returns this browser's CSRF token, setting the cookie when it
// has none (or a malformed one).
func (b browserCookies) csrfToken(c *echo.Context) string {
	v := b.value(c, b.csrfName())
	if raw, err := base64.RawURLEncoding.DecodeString(v); err == nil && len(raw) == 32 {
		return v
	}
	var r [32]byte
	_, _ = rand.Read(r[:])
	v = base64.RawURLEncoding.EncodeToString(r[:])
	b.set(c, b.csrfName(), v, 0)
	return v
}

// checkCSRF compares the form's token with the cookie's, in constant time.
func (b browserCookies) checkCSRF(c *echo.Context, form url.Values) error {
	cookie, sent := b.value(c, b.csrfName()), form.Get("csrf")
	if cookie == "" || subtle.ConstantTimeCompare([]byte(cookie), []byte(sent)) != 1 {
		return errCSRF
	}
	return nil
}

// pageHeaders are the headers of every page and redirect of the flow: no
// caching, no referrer (the URL holds the request), no framing, no script.
func pageHeaders(c *echo.Context, formAction string) {
	h := c.Response().Header()
	csp := "default-src 'none'; style-src 'self'; img-src 'self'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'"
	if formAction != "" && !strings.ContainsAny(formAction, " ;,'\"") {
		// A browser applies form-action to the redirect after the
		// sign-in form too: the app's redirect URI must be allowed.
		csp += " " + formAction
	}
	h.Set("Content-Security-Policy", csp)
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
}

// signInView is the data of the sign-in page.
type signInView struct {
	Page   account.SignInPage
	Hidden []hiddenField
	CSRF   string
	Action string
	// Message is the one message of a failed sign-in, "" for none.
	Message string
	// Restart is the authorization request's URL, which starts the
	// sign-in again (from the second step).
	Restart string
}

// Messages of a failed sign-in: one for every wrong or locked credential,
// so that the page tells nothing of which part was wrong.
const (
	msgSignInFailed = "The account, username or password is not right, or there were too many attempts. Check them and try again later."
	msgSignInBroken = "The service could not check your sign-in just now. Please try again in a moment."
	// msgSignInCodeFailed is a failed second step: the code, or the
	// password behind it, was wrong (the page does not tell which).
	msgSignInCodeFailed = "The password or the code is not right, or there were too many attempts. Enter a new code, or start again if the password may be wrong."
	// msgSignInRestart is a second step that expired, was used already,
	// or belongs to another browser or request.
	msgSignInRestart = "Your sign-in took too long or was already used. Please enter your password again."
)

type hiddenField struct{ Name, Value string }

// messageView is the data of the error and signed-out pages.
type messageView struct {
	Title, Message string
}

// renderPage writes one of the pages with status.
func renderPage(c *echo.Context, status int, name string, data any) error {
	var buf strings.Builder
	if err := pages.ExecuteTemplate(&buf, name, data); err != nil {
		return fmt.Errorf("render %s: %w", name, err)
	}
	return c.HTML(status, buf.String())
}

// authorizationRequest decodes the parameters of an authorization
// request; a repeated one makes it malformed (RFC 6749 section 3.1).
func authorizationRequest(q url.Values) account.AuthorizationRequest {
	r := account.AuthorizationRequest{
		ClientID: q.Get("client_id"), RedirectURI: q.Get("redirect_uri"), ResponseType: q.Get("response_type"),
		Scope: q.Get("scope"), State: q.Get("state"), Nonce: q.Get("nonce"), CodeChallenge: q.Get("code_challenge"),
		CodeChallengeMethod: q.Get("code_challenge_method"), Prompt: q.Get("prompt"), MaxAge: q.Get("max_age"),
		LoginHint: q.Get("login_hint"), AccountName: q.Get("account_name"),
	}
	for _, name := range authorizeParams {
		if len(q[name]) > 1 {
			r.Malformed = fmt.Sprintf("The parameter %q is repeated.", name)
		}
	}
	return r
}

// hiddenFields are the authorization request's parameters as the form
// carries them back.
func hiddenFields(r account.AuthorizationRequest) []hiddenField {
	values := []string{r.ClientID, r.RedirectURI, r.ResponseType, r.Scope, r.State, r.Nonce,
		r.CodeChallenge, r.CodeChallengeMethod, r.Prompt, r.MaxAge, r.LoginHint, r.AccountName}
	var out []hiddenField
	for i, name := range authorizeParams {
		if values[i] != "" {
			out = append(out, hiddenField{name, values[i]})
		}
	}
	return out
}

// signInDeps are what the handlers of the flow share.
type signInDeps struct {
	authz   *account.Authorizations
	cookies browserCookies
	metrics *authMetrics
}

// handleAuthorize is GET /oauth2/authorize.
func (d signInDeps) handleAuthorize(c *echo.Context) error {
	req := authorizationRequest(c.Request().URL.Query())
	out, err := d.authz.Authorize(c.Request().Context(), req, d.cookies.value(c, d.cookies.sessionName()))
	if err != nil {
		return d.errorPage(c, err)
	}
	d.metrics.countAuthorization(out)
	return d.answer(c, out, http.StatusFound, nil)
}

// handleSignIn is POST /oauth2/signin, the sign-in page submitted.
func (d signInDeps) handleSignIn(c *echo.Context) error {
	form, err := readForm(c)
	if err != nil {
		return d.errorPage(c, err)
	}
	if err := d.cookies.checkCSRF(c, form); err != nil {
		return d.errorPage(c, err)
	}
	out, err := d.authz.SignIn(c.Request().Context(), account.SignInAttempt{
		Request:     authorizationRequest(form),
		AccountName: form.Get("accountName"), Username: form.Get("username"), Password: form.Get("password"),
		OTP: form.Get("otp"), Pending: form.Get("pending"), CSRF: form.Get("csrf"), ClientIP: c.RealIP(),
	})
	d.metrics.countSignIn(methodPage, err)
	if err != nil && out.Page.Request.ClientID == "" {
		return d.errorPage(c, err)
	}
	d.metrics.countAuthorization(out)
	return d.answer(c, out, http.StatusSeeOther, err)
}

// answer writes an Authorization: the redirect (with the browser
// session's cookie when one started), or the sign-in page, with the
// status of failed when the page shows a failed sign-in.
func (d signInDeps) answer(c *echo.Context, out account.Authorization, redirect int, failed error) error {
	if out.RedirectTo != "" {
		pageHeaders(c, "")
		if bs := out.BrowserSession; bs != nil {
			d.cookies.set(c, d.cookies.sessionName(), bs.Value, int(bs.MaxAge/time.Second))
		}
		return c.Redirect(redirect, out.RedirectTo)
	}
	pageHeaders(c, out.Page.FormAction)
	hidden := hiddenFields(out.Page.Request)
	view := signInView{Page: out.Page, Hidden: hidden, CSRF: d.cookies.csrfToken(c), Action: pathSignIn}
	if out.Page.AskOTP {
		q := url.Values{}
		for _, f := range hidden {
			q.Set(f.Name, f.Value)
		}
		view.Restart = pathAuthorize + "?" + q.Encode()
	}
	status := http.StatusOK
	switch {
	case errors.Is(failed, account.ErrMFARequired):
		// The second step's page itself: no failure to show.
	case errors.Is(failed, account.ErrPendingSignInGone):
		status, view.Message = http.StatusUnauthorized, msgSignInRestart
	case failed != nil:
		p := problemFor(failed)
		status = p.Status
		view.Message = msgSignInBroken
		if status == http.StatusUnauthorized || status == http.StatusTooManyRequests {
			view.Message = msgSignInFailed
			if out.Page.AskOTP {
				view.Message = msgSignInCodeFailed
			}
		}
		if p.RetryAfter > 0 {
			c.Response().Header().Set("Retry-After", strconv.FormatInt(int64((p.RetryAfter+time.Second-1)/time.Second), 10))
		}
	}
	if err := renderPage(c, status, "signin.html", view); err != nil {
		return errors.Join(failed, err)
	}
	return failed
}

// errorPage writes the page of a refused request with the status
// problemFor decides, and returns err still (the observer records it).
func (d signInDeps) errorPage(c *echo.Context, err error) error {
	pageHeaders(c, "")
	p := problemFor(err)
	view := messageView{Title: "Sign-in is not possible", Message: pageMessage(err, p.Detail)}
	if werr := renderPage(c, p.Status, "message.html", view); werr != nil {
		return errors.Join(err, werr)
	}
	return err
}

// pageMessage is what the error page says to a person.
func pageMessage(err error, detail string) string {
	switch {
	case errors.Is(err, account.ErrUnknownClient):
		return "The app that sent you here is not known to this service. Go back to the app and try again, or contact its support."
	case errors.Is(err, account.ErrUnregisteredRedirectURI):
		return "The app that sent you here asked to return to an address it has not registered, so you are not sent back. Contact the app's support."
	case errors.Is(err, errCSRF):
		return "This sign-in form has expired or was sent from another browser. Go back to the app and sign in again."
	case errors.Is(err, account.ErrInvalidLogoutRequest):
		return "The app's sign-out request is not valid, so you are not sent back to it. " + detail
	}
	return detail
}

// handleLogout is GET and POST /oauth2/logout.
func (d signInDeps) handleLogout(c *echo.Context) error {
	q := c.Request().URL.Query()
	if c.Request().Method == http.MethodPost {
		form, err := readForm(c)
		if err != nil {
			return d.errorPage(c, err)
		}
		q = form
	}
	in := account.LogoutRequest{IDTokenHint: q.Get("id_token_hint"), ClientID: q.Get("client_id"),
		PostLogoutRedirectURI: q.Get("post_logout_redirect_uri"), State: q.Get("state")}
	for _, name := range []string{"id_token_hint", "client_id", "post_logout_redirect_uri", "state"} {
		if len(q[name]) > 1 {
			in.Malformed = fmt.Sprintf("The parameter %q is repeated.", name)
		}
	}
	out, err := d.authz.LogOut(c.Request().Context(), in, d.cookies.value(c, d.cookies.sessionName()))
	if err != nil {
		return d.errorPage(c, err)
	}
	d.cookies.set(c, d.cookies.sessionName(), "", -1)
	d.metrics.countLogout(out)
	pageHeaders(c, "")
	if out.RedirectTo != "" {
		return c.Redirect(http.StatusSeeOther, out.RedirectTo)
	}
	return renderPage(c, http.StatusOK, "message.html", messageView{Title: "Signed out",
		Message: "You are signed out. You can close this window."})
}

// handleStylesheet serves the pages' stylesheet.
func handleStylesheet(c *echo.Context) error {
	c.Response().Header().Set("Cache-Control", "public, max-age=3600")
	c.Response().Header().Set("X-Content-Type-Options", "nosniff")
	return c.Blob(http.StatusOK, "text/css; charset=utf-8", stylesheet)
}
