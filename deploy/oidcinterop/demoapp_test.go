package oidcinterop

import (
	"cmp"
	"html/template"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/deploy/devstack/demoapp"
)

// The web app's paths on the demo app's server (its redirect and
// post-logout redirect URIs): a browser lands on a plain page there, and
// the tests read its URL.
const (
	appRedirectPath   = "/web-app/callback"
	appPostLogoutPath = "/web-app/signed-out"
	// framerPath is a page of another site that frames the URL src.
	framerPath = "/framer"
)

var framer = template.Must(template.New("framer").Parse(`<!doctype html><title>framer</title><iframe src="{{.}}"></iframe>`))

// chromium is the browser the suite drives: CHROMIUM_PATH, else Debian's.
func chromium() string { return cmp.Or(os.Getenv("CHROMIUM_PATH"), "chromium") }

// testDemoApp is make run's demo app on a port of the test's: it listens
// from the start (its origin goes into the services' CORS configuration)
// and serves once its client exists. It also answers the web app's
// redirect URIs.
type testDemoApp struct {
	origin  string
	handler atomic.Pointer[http.Handler]
}

func newDemoApp(t *testing.T) *testDemoApp {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := &testDemoApp{origin: "http://" + ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case appRedirectPath, appPostLogoutPath:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_, _ = w.Write([]byte("<!doctype html><title>web app</title>"))
			return
		case framerPath:
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			_ = framer.Execute(w, r.URL.Query().Get("src"))
			return
		}
		h := app.handler.Load()
		if h == nil {
			http.Error(w, "not ready", http.StatusServiceUnavailable)
			return
		}
		(*h).ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return app
}

// serve bundles the JavaScript client from its sources, as make run does,
// and serves the app for the client clientID.
func (a *testDemoApp) serve(t *testing.T, accountURL, conversationsURL, clientID, accountName string) {
	t.Helper()
	bundle, err := demoapp.BundleClient(filepath.Join("..", "..", "clients", "js", "src", "index.ts"))
	if err != nil {
		t.Fatal(err)
	}
	h := demoapp.Handler(demoapp.Config{Issuer: accountURL, ConversationsURL: conversationsURL, ClientID: clientID, AccountName: accountName}, bundle)
	a.handler.Store(&h)
}
