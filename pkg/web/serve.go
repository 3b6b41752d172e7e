package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// Server is one listener and what it serves.
type Server struct {
	// Name appears in logs ("api", "ops").
	Name     string
	Listener net.Listener
	Handler  http.Handler
	// Observe, when set, answers the requests net/http refuses before any
	// handler runs as problem+json with a request id, and logs and counts
	// them (route "refused") with its logger and registry.
	Observe *Config
	// ReadTimeout and WriteTimeout bound reading a whole request and
	// writing its response; 0 means 30 s.
	ReadTimeout, WriteTimeout time.Duration
}

// defaultIOTimeout is the read and write timeout of a Server that sets none.
const defaultIOTimeout = 30 * time.Second

// ReadHeaderTimeout bounds reading a request's headers, from when the
// server starts reading the connection: a client that sends nothing for
// that long has its connection closed without an answer (there is no
// request to answer), so that idle connections cannot hold the server.
const ReadHeaderTimeout = 10 * time.Second

func orDefault(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Serve runs every server until ctx is done, then shuts them all down
// gracefully: listeners close at once (new connections are refused) and
// in-flight requests get up to drain to finish. It returns the first serve
// error, or nil after a clean drain.
func Serve(ctx context.Context, logger *slog.Logger, drain time.Duration, servers ...Server) error {
	errc := make(chan error, len(servers))
	https := make([]*http.Server, len(servers))
	for i, s := range servers {
		hs := &http.Server{
			Handler:           s.Handler,
			ReadHeaderTimeout: ReadHeaderTimeout,
			ReadTimeout:       orDefault(s.ReadTimeout, defaultIOTimeout),
			WriteTimeout:      orDefault(s.WriteTimeout, defaultIOTimeout),
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
		}
		https[i] = hs
		logger.Info("listening", "server", s.Name, "addr", s.Listener.Addr().String())
		listener := s.Listener
		if s.Observe != nil {
			listener = observeRefusals(listener, *s.Observe)
		}
		go func() {
			if err := hs.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", s.Name, err)
				return
			}
			errc <- nil
		}()
	}

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}

	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), drain)
	defer cancel()
	for i, hs := range https {
		if err := hs.Shutdown(shutdownCtx); err != nil {
			logger.Warn("shutdown did not drain in time", "server", servers[i].Name, "error", err)
			_ = hs.Close()
		}
	}
	return serveErr
}

// Listen opens a TCP listener, wrapping the error with the address.
func Listen(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	return l, nil
}
