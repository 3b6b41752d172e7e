package servicecmd

import (
	"context"
	"log/slog"
	"time"
)

// PurgeEvery deletes, every interval until ctx ends, what purge finds
// outdated at that time (expired sessions, old throttle counters, old
// idempotency keys). Every replica runs it; the deletes are idempotent. It
// stands in for TTL indexes, which the embedded development server lacks.
func PurgeEvery(ctx context.Context, logger *slog.Logger, interval time.Duration, what string,
	purge func(ctx context.Context, now time.Time) (int64, error)) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		n, err := purge(ctx, time.Now())
		if err != nil {
			logger.Warn("purge "+what, "error", err.Error())
			continue
		}
		logger.Debug("purged "+what, "count", n)
	}
}
