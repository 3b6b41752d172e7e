package web

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/labstack/echo/v5"
)

// AccessLog writes one structured line per request. It logs the route
// pattern rather than the raw URL and never logs headers or bodies, so no
// token or password can reach the log through it.
func AccessLog(logger *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			start := time.Now()
			err := next(c)
			_, status := echo.ResolveResponseStatus(c.Response(), err)
			level := slog.LevelInfo
			if status >= http.StatusInternalServerError {
				level = slog.LevelError
			}
			r := c.Request()
			logger.LogAttrs(r.Context(), level, "http request",
				slog.String("request_id", RequestIDFrom(r.Context())),
				slog.String("method", r.Method),
				slog.String("route", c.Path()),
				slog.Int("status", status),
				slog.Float64("latency_ms", float64(time.Since(start).Microseconds())/1000),
				slog.String("remote_ip", c.RealIP()),
			)
			return err
		}
	}
}

// Recover turns a panic in a handler into a 500 problem and a log line with
// the stack, so one bad request can never take the process down.
func Recover(logger *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) (err error) {
			defer func() {
				if v := recover(); v != nil {
					if v == http.ErrAbortHandler {
						panic(v)
					}
					logger.ErrorContext(c.Request().Context(), "handler panic",
						"request_id", RequestIDFrom(c.Request().Context()),
						"panic", fmt.Sprint(v),
						"stack", string(debug.Stack()),
					)
					err = fmt.Errorf("panic: %v", v)
				}
			}()
			return next(c)
		}
	}
}
