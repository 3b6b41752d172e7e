package http

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
)

// created is the successful response of a POST that creates a resource.
type created struct {
	location, etag string
	body           []byte // JSON
}

// decodeBody decodes the JSON body of c into dst like web.DecodeJSON and
// returns the bytes it read, for the idempotency fingerprint.
func decodeBody(c *echo.Context, maxBytes int64, dst any) ([]byte, error) {
	var raw bytes.Buffer
	r := c.Request()
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(r.Body, &raw), r.Body}
	if err := web.DecodeJSON(c, maxBytes, dst); err != nil {
		return nil, err
	}
	return raw.Bytes(), nil
}

// idempotent answers a POST that creates a resource, honouring its
// Idempotency-Key (contract section 8):
//
//   - without the header, create runs with a fresh id ("": the store's);
//   - with it, the key is claimed for the caller (one upsert): the first
//     request reserves the id of the resource and fingerprints itself
//     (method, path, compacted body). A later request with the key and
//     another fingerprint is a 422; one that finds a saved response gets
//     it again (status, body, Location, ETag) with Idempotent-Replayed:
//     true; one that finds none (the first is still running, or failed,
//     or stopped before saving) runs create with the reserved id, and the
//     store returns the resource already stored under it rather than
//     make a second. So concurrent duplicates both answer 201 with one
//     resource, and no request ever waits for another.
//
// Failed requests save nothing: a retry with the same key and body runs
// again (and still creates at most one resource).
func idempotent(c *echo.Context, store conversations.IdempotencyStore, logger *slog.Logger, who conversations.Caller,
	body []byte, newID func() string, create func(resourceID string) (created, error)) error {
	values := c.Request().Header.Values("Idempotency-Key")
	if len(values) == 0 {
		res, err := create("")
		if err != nil {
			return err
		}
		return writeCreated(c, res, false)
	}
	if len(values) > 1 || !validIdempotencyKey(values[0]) {
		return problem.Validation(problem.FieldError{Field: "Idempotency-Key",
			Reason: "must be given once, as 1 to 255 printable ASCII characters"})
	}
	key := conversations.IdempotencyKey{AccountID: who.AccountID, Caller: who.KeyOwner(), Key: values[0]}
	fp := fingerprint(c.Request(), body)
	rec, err := store.ClaimIdempotencyKey(c.Request().Context(), conversations.IdempotencyRecord{
		IdempotencyKey: key, Fingerprint: fp, ResourceID: newID(),
	})
	if err != nil {
		return err
	}
	if rec.Fingerprint != fp {
		return storeProblem(conversations.ErrIdempotencyKeyReused)
	}
	if saved := rec.Response; saved != nil {
		return writeCreated(c, created{location: saved.Location, etag: saved.ETag, body: saved.Body}, true)
	}
	res, err := create(rec.ResourceID)
	if err != nil {
		return err
	}
	if err := store.SaveIdempotentResponse(c.Request().Context(), key, conversations.SavedResponse{
		Status: http.StatusCreated, Location: res.location, ETag: res.etag, Body: res.body,
	}); err != nil {
		// The resource exists; a retry finds it under the reserved id
		// and creates nothing, so this answer stands.
		logger.WarnContext(c.Request().Context(), "save idempotent response", "error", err.Error())
	}
	return writeCreated(c, res, false)
}

func writeCreated(c *echo.Context, res created, replayed bool) error {
	h := c.Response().Header()
	h.Set("Location", res.location)
	if res.etag != "" {
		h.Set("ETag", res.etag)
	}
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	return c.Blob(http.StatusCreated, "application/json", res.body)
}

func validIdempotencyKey(k string) bool {
	if len(k) < 1 || len(k) > conversations.MaxIdempotencyKeyLen {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// fingerprint identifies a request for its idempotency key: method, path
// and the body without insignificant whitespace. The body was decoded
// already, so it is valid JSON.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "\n"))
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}
