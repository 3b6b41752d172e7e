package web

import (
	"errors"
	"log/slog"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/problem"
)

// ErrorHandler writes every error as problem+json. Problems pass through as
// they are; Echo's own errors (unknown route, wrong method, body too large)
// get their contract code; anything else is a 500 whose cause is logged and
// never shown to the client.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(c *echo.Context, err error) {
		if resp, _ := echo.UnwrapResponse(c.Response()); resp != nil && resp.Committed {
			return
		}
		p := toProblem(err)
		if p.Status >= http.StatusInternalServerError {
			logger.ErrorContext(c.Request().Context(), "request failed",
				"request_id", RequestIDFrom(c.Request().Context()),
				"method", c.Request().Method,
				"route", c.Path(),
				"status", p.Status,
				"error", err.Error(),
			)
		}
		if err := problem.Write(c.Response(), p); err != nil {
			logger.DebugContext(c.Request().Context(), "write problem", "error", err)
		}
	}
}

func toProblem(err error) *problem.Problem {
	if p := problem.From(err); p.Status != http.StatusInternalServerError {
		return p
	}
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		return problem.New(http.StatusRequestEntityTooLarge, problem.CodeBodyTooLarge, "The request body is too large.")
	}
	switch echo.StatusCode(err) {
	case http.StatusNotFound:
		return problem.NotFound("No such resource.")
	case http.StatusMethodNotAllowed:
		return problem.New(http.StatusMethodNotAllowed, problem.CodeMethodNotAllowed, "This method is not allowed on this resource.")
	case http.StatusRequestEntityTooLarge:
		return problem.New(http.StatusRequestEntityTooLarge, problem.CodeBodyTooLarge, "The request body is too large.")
	case http.StatusUnsupportedMediaType:
		return problem.New(http.StatusUnsupportedMediaType, problem.CodeUnsupportedMediaType, "The request body must be application/json.")
	}
	return problem.Internal()
}
