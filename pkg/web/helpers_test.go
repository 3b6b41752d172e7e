package web_test

import (
	"io"
	"log/slog"
)

// slogJSON logs JSON at every level to w, as the services do.
func slogJSON(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
