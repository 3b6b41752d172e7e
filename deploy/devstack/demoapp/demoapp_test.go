package demoapp

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The app is served whole from the binary: the page at / and /callback
// (no inline script, never framed), its script, the vendored library with
// its license, the JavaScript client bundled from its sources, and the
// configuration the page reads.
func TestHandlerServesTheAppFromTheBinary(t *testing.T) {
	bundle, err := BundleClient("../../../clients/js/src/index.ts")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Issuer: "http://127.0.0.1:8080", ConversationsURL: "http://127.0.0.1:8081", ClientID: "cli_demo", AccountName: "demo"}
	srv := httptest.NewServer(Handler(cfg, bundle))
	defer srv.Close()
	get := func(path string) (*http.Response, string) {
		t.Helper()
		res, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", path, res.StatusCode)
		}
		return res, string(body)
	}
	for _, path := range []string{"/", "/callback?code=x&state=y"} {
		res, body := get(path)
		csp := res.Header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || strings.Contains(csp, "unsafe-inline") ||
			!strings.Contains(csp, "connect-src 'self' http://127.0.0.1:8080 http://127.0.0.1:8081") {
			t.Errorf("GET %s: Content-Security-Policy %q", path, csp)
		}
		if !strings.Contains(body, `<script type="module" src="/app.js">`) || strings.Contains(body, "<script>") {
			t.Errorf("GET %s: the page does not load app.js alone:\n%s", path, body)
		}
	}
	if _, body := get("/app.js"); !strings.Contains(body, `from "/vendor/oauth4webapi.js"`) || !strings.Contains(body, `from "/client/index.js"`) {
		t.Errorf("app.js does not import the library and the client:\n%s", body)
	}
	if _, body := get("/vendor/oauth4webapi.js"); !strings.Contains(body, "export async function discoveryRequest") {
		t.Error("the vendored oauth4webapi has no discoveryRequest")
	}
	if _, body := get("/vendor/oauth4webapi.LICENSE.md"); !strings.Contains(body, "MIT License") {
		t.Error("the vendored library's license is not served")
	}
	res, body := get("/client/index.js")
	if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/javascript") || !strings.Contains(body, "PlatformClient") ||
		!strings.Contains(body, "export {") || strings.Contains(body, "import ") {
		t.Errorf("the client is not one ES module exporting PlatformClient (%s, %d bytes)", res.Header.Get("Content-Type"), len(body))
	}
	var got Config
	if _, body := get("/config.json"); json.Unmarshal([]byte(body), &got) != nil || got != cfg {
		t.Errorf("config.json %s, want %+v", body, cfg)
	}
	if res, err := http.Get(srv.URL + "/other"); err != nil || res.StatusCode != http.StatusNotFound {
		t.Errorf("GET /other: %v %v, want 404", res.StatusCode, err)
	}
}

// A client source that does not compile is reported with esbuild's
// message, never served half-built.
func TestBundleClientReportsErrors(t *testing.T) {
	if _, err := BundleClient("no/such/index.ts"); err == nil || !strings.Contains(err.Error(), "no/such/index.ts") {
		t.Errorf("err = %v", err)
	}
}
