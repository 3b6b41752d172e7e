package web

import (
	"strconv"
	"time"

	"github.com/labstack/echo/v5"
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	duration *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "http_request_duration_seconds",
			Help:    "Duration of HTTP requests by route pattern, method and status.",
			Buckets: prometheus.DefBuckets,
		}, []string{"route", "method", "status"}),
	}
	reg.MustRegister(m.duration)
	return m
}

func (m *metrics) middleware(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		start := time.Now()
		err := next(c)
		_, status := echo.ResolveResponseStatus(c.Response(), err)
		// The route pattern, not the URL, keeps label cardinality bounded.
		route := c.Path()
		if route == "" {
			route = "unmatched"
		}
		m.duration.WithLabelValues(route, c.Request().Method, strconv.Itoa(status)).Observe(time.Since(start).Seconds())
		return err
	}
}
