package servicecmd

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/acme/platform/pkg/web"
)

// TestOpsRoutesBesideTheProbes: a service's own operations routes are
// served beside /healthz and /readyz, on its method only.
func TestOpsRoutesBesideTheProbes(t *testing.T) {
	called := 0
	s := Service{Registry: NewRegistry(), Ops: map[string]http.Handler{
		"POST /relay/wake": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			called++
			w.WriteHeader(http.StatusNoContent)
		}),
	}}
	h := s.opsHandler(map[string]web.Check{"ok": func(context.Context) error { return nil }})
	for _, tc := range []struct {
		method, path string
		want, calls  int
	}{
		{http.MethodPost, "/relay/wake", http.StatusNoContent, 1},
		{http.MethodGet, "/relay/wake", http.StatusNotFound, 1}, // the probes' handler answers the rest
		{http.MethodGet, "/healthz", http.StatusOK, 1},
		{http.MethodGet, "/readyz", http.StatusOK, 1},
	} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(tc.method, tc.path, nil))
		if rec.Code != tc.want || called != tc.calls {
			t.Errorf("%s %s: %d (%d calls), want %d (%d)", tc.method, tc.path, rec.Code, called, tc.want, tc.calls)
		}
	}
}
