package web_test

import (
	"bytes"
	"encoding/json"
	"mime"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/web"
)

// loginLike is shaped like the login request: strings only.
type loginLike struct {
	Username    string `json:"username"`
	Password    string `json:"password"`
	AccountName string `json:"accountName"`
}

// fuzzLimits are the body limits DecodeJSON is fuzzed with: the login
// limit, and small ones so that short inputs reach the 413 path too.
var fuzzLimits = []int64{16 << 10, 64, 1}

// FuzzDecodeJSON sends arbitrary bodies and Content-Types through
// web.DecodeJSON into a login-shaped struct. The error is nil or a
// *problem.Problem: 415 for a body that is not application/json, 413 for
// one over the limit, 400 otherwise, with the matching code. A decoding
// that succeeds agrees with encoding/json on the same bytes and had a JSON
// object, and one that fails does so only when encoding/json fails too or
// the body is no object (null, an array, a scalar).
func FuzzDecodeJSON(f *testing.F) {
	for _, seed := range []struct {
		body, contentType string
		limit             uint8
	}{
		{`{"username":"alice","password":"pw","accountName":"acme"}`, "application/json", 0},
		{`{"username":"alice","password":"pw","accountName":"acme"}`, "application/json; charset=utf-8", 0},
		{`{"username":"alice","password":"pw","accountName":"acme"}`, "APPLICATION/JSON", 0},
		{`{"username":"alice","password":"pw","accountName":"acme"}`, "text/plain", 0},
		{`{"username":"alice"}`, "", 0},
		{`{"username":"alice"}`, "application/json; charset", 0},
		{`{"username":"alice"}`, "application/jsonx", 0},
		{`{"username":{"$ne":null},"password":"x","accountName":"acme"}`, "application/json", 0},
		{`{"username":["a"],"password":1,"accountName":true}`, "application/json", 0},
		{`{"username":"alice"} {"username":"bob"}`, "application/json", 0},
		{`{"username":"alice"}]`, "application/json", 0},
		{`["alice"]`, "application/json", 0},
		{`"alice"`, "application/json", 0},
		{`null`, "application/json", 0},
		{`{}`, "application/json", 0},
		{``, "application/json", 0},
		{`{"username":"al`, "application/json", 0},
		{"{\"username\":\"\xff\xfe\"}", "application/json", 0},
		{`{"username":"\ud800"}`, "application/json", 0},
		{`{"username":"alice","username":"bob"}`, "application/json", 0},
		{`{"Username":"alice","unknown":{"deep":[1,2,3]}}`, "application/json", 0},
		{`{"username":"` + strings.Repeat("a", 100) + `"}`, "application/json", 1},
		{`{}`, "application/json", 2},
		{` {} `, "application/json", 2},
		{`{"username":"` + strings.Repeat("a", 17<<10) + `"}`, "application/json", 0},
	} {
		f.Add([]byte(seed.body), seed.contentType, seed.limit)
	}

	f.Fuzz(func(t *testing.T, body []byte, contentType string, limitSel uint8) {
		limit := fuzzLimits[int(limitSel)%len(fuzzLimits)]
		req := httptest.NewRequest(http.MethodPost, "/login", bytes.NewReader(body))
		req.Header.Set("Content-Type", contentType)
		c := echo.New().NewContext(req, httptest.NewRecorder())

		var got loginLike
		err := web.DecodeJSON(c, limit, &got)

		mt, _, mtErr := mime.ParseMediaType(contentType)
		isJSON := mtErr == nil && mt == "application/json"
		var want loginLike
		wantErr := json.Unmarshal(body, &want)
		trimmed := bytes.TrimLeft(body, " \t\r\n")
		isObject := len(trimmed) > 0 && trimmed[0] == '{'

		if err == nil {
			switch {
			case !isJSON:
				t.Fatalf("accepted Content-Type %q", contentType)
			case int64(len(body)) > limit:
				t.Fatalf("accepted %d bytes over a limit of %d", len(body), limit)
			case wantErr != nil:
				t.Fatalf("accepted %q, which encoding/json refuses: %v", body, wantErr)
			case !isObject:
				t.Fatalf("accepted %q, which is no JSON object", body)
			case got != want:
				t.Fatalf("decoded %q as %+v, encoding/json as %+v", body, got, want)
			}
			return
		}

		// The decoder says why it refuses; the status and code are
		// decided where every refusal's are (ProblemFor).
		p := web.ProblemFor(err)
		if p.Status == http.StatusInternalServerError {
			t.Fatalf("error %v (%T) is not a refusal ProblemFor knows", err, err)
		}
		var wantStatus int
		var codes []string
		switch {
		case !isJSON:
			wantStatus, codes = http.StatusUnsupportedMediaType, []string{problem.CodeUnsupportedMediaType}
		case int64(len(body)) > limit:
			wantStatus, codes = http.StatusRequestEntityTooLarge, []string{problem.CodeBodyTooLarge}
		default:
			wantStatus, codes = http.StatusBadRequest, []string{problem.CodeMalformedJSON, problem.CodeValidationFailed}
			if wantErr == nil && isObject {
				t.Fatalf("refused the object %q, which encoding/json accepts: %v", body, err)
			}
		}
		if p.Status != wantStatus || !slices.Contains(codes, p.Code) {
			t.Fatalf("body %q, Content-Type %q, limit %d: problem %d %s, want %d %v",
				body, contentType, limit, p.Status, p.Code, wantStatus, codes)
		}
		if p.Type != problem.TypePrefix+p.Code || p.Title == "" {
			t.Fatalf("malformed problem %+v", p)
		}
		if p.Code == problem.CodeValidationFailed {
			if len(p.Errors) == 0 {
				t.Fatalf("validation problem without fields: %+v", p)
			}
			for _, fe := range p.Errors {
				if fe.Field == "" || fe.Reason == "" {
					t.Fatalf("validation problem with an empty field error: %+v", p)
				}
			}
		}
	})
}
