package mongo

import (
	"context"

	"github.com/acme/platform/pkg/mongodb"
)

// LoadOrCreateSigningKey returns the stored private key (JWK JSON) for alg,
// storing the output of generate when there is none. Replicas starting
// together agree on one key (see mongodb.LoadOrCreate).
func (s *Store) LoadOrCreateSigningKey(ctx context.Context, alg string, generate func() ([]byte, error)) ([]byte, error) {
	value, err := mongodb.LoadOrCreate(ctx, s.keys, alg, func() (string, error) {
		key, err := generate()
		return string(key), err
	})
	return []byte(value), err
}
