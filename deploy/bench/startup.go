package main

import (
	"context"
	"fmt"
	"time"
)

// startupRows restarts each service rounds times on the provisioned store
// (its signing key, indexes and users exist, as at any restart or
// scale-out) and times exec to the first 200 of /readyz. The two services
// alternate; the account service of the stack keeps serving the JWKS.
func startupRows(ctx context.Context, s *stack) ([]row, error) {
	var account, conv []float64
	for range s.o.rounds {
		if err := s.account.Stop(stopTimeout); err != nil {
			return nil, err
		}
		p, err := s.startAccount(ctx)
		if err != nil {
			return nil, err
		}
		s.account = p
		account = append(account, ms(p.Ready))

		if err := s.conv.Stop(stopTimeout); err != nil {
			return nil, err
		}
		if p, err = s.startConversations(ctx); err != nil {
			return nil, err
		}
		s.conv = p
		conv = append(conv, ms(p.Ready))
	}
	mk := func(name string, v []float64, first time.Duration) row {
		sp := spreadOf(v)
		return row{
			measure: "Start-up: " + name + ", exec to /readyz 200",
			subject: fmt.Sprintf("restart on existing data; first start on an empty database %.0f ms", ms(first)),
			against: "–",
			value:   fmt.Sprintf("**%.0f ms** (%.0f–%.0f, n=%d)", sp.median, sp.min, sp.max, sp.n),
			id:      "startup",
		}
	}
	return []row{
		mk("account", account, s.firstAccountStart),
		mk("conversations", conv, s.firstConversationsRun),
	}, nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
