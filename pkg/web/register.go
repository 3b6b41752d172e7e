package web

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// RegisterShared registers c on reg and returns it, or returns the
// collector of the same kind already registered under its name: several
// handlers of one process (the API and the start-up answers before it, say)
// then record into the same series. Any other clash is a programming error,
// and panics, like prometheus.MustRegister.
func RegisterShared[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	var already prometheus.AlreadyRegisteredError
	if errors.As(err, &already) {
		if existing, ok := already.ExistingCollector.(C); ok {
			return existing
		}
	}
	panic(fmt.Errorf("register metrics: %w", err))
}
