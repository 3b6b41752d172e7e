package main

import (
	"context"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/crypto/argon2"
)

// loginRow measures POST /login over loopback against bare argon2id
// verification of the same password with the parameters and salt stored
// for the user, at the same concurrency on the same cores.
func loginRow(ctx context.Context, s *stack) (row, error) {
	o := s.o
	client := loopbackClient(o.workers)
	bodies := make([]string, o.workers)
	bare := make([]func() error, o.workers)
	var params string
	for i := range o.workers {
		name, password := benchUser(i)
		b, _ := json.Marshal(map[string]string{"username": name, "password": password, "accountName": benchAccount})
		bodies[i] = string(b)
		hash, err := s.storedHash(ctx, name)
		if err != nil {
			return row{}, err
		}
		if bare[i], params, err = bareArgon2id(hash, password); err != nil {
			return row{}, err
		}
	}
	login := func(ctx context.Context, worker int) error {
		status, body, err := post(ctx, client, s.accountURL+"/login", bodies[worker])
		if err != nil {
			return err
		}
		if status != http.StatusOK {
			return fmt.Errorf("login answered %d: %s", status, body)
		}
		return nil
	}
	sides := []side{
		{name: "POST /login", workers: o.workers, op: login},
		{name: "argon2id", workers: o.workers, op: func(_ context.Context, w int) error { return bare[w]() }},
	}
	samples, err := alternate(ctx, o.rounds, o.serviceRun, sides...)
	if err != nil {
		return row{}, fmt.Errorf("login: %w", err)
	}
	if err := s.profile(ctx, s.account, sides[0], "login"); err != nil {
		return row{}, err
	}
	r := ratios(samples[0], samples[1], throughputRatio)
	return row{
		measure: fmt.Sprintf("Login: POST /login vs bare argon2id, %d concurrent", o.workers),
		subject: fmt.Sprintf("%s logins/s; peak RSS of the account process %.0f MiB", oneDecimal(medianOf(samples[0], sample.perSecond)), s.account.peakRSS()),
		against: fmt.Sprintf("%s verifications/s (%s)", oneDecimal(medianOf(samples[1], sample.perSecond)), params),
		ratio:   r, unit: "× bare", target: "≥ 0.90", hasGoal: true, met: r.median >= 0.90, id: "login",
	}, nil
}

// storedHash reads the user's password hash from the account database,
// so that the bare side runs with exactly the stored parameters and salt.
func (s *stack) storedHash(ctx context.Context, username string) (string, error) {
	var doc struct {
		PasswordHash string `bson:"password_hash"`
	}
	err := s.client.Database(s.accountDB).Collection("users").FindOne(ctx, bson.D{{Key: "username", Value: username}}).Decode(&doc)
	if err != nil {
		return "", fmt.Errorf("read the stored hash of %s: %w", username, err)
	}
	return doc.PasswordHash, nil
}

// bareArgon2id parses a PHC string ($argon2id$v=19$m=…,t=…,p=…$salt$hash)
// and returns a check of password against it: argon2.IDKey and a
// constant-time compare, nothing else.
func bareArgon2id(phc, password string) (check func() error, params string, err error) {
	parts := strings.Split(phc, "$")
	if len(parts) != 6 || parts[1] != "argon2id" {
		return nil, "", fmt.Errorf("not an argon2id PHC string: %q", phc)
	}
	var m, t uint32
	var p uint8
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &m, &t, &p); err != nil {
		return nil, "", fmt.Errorf("argon2id parameters %q: %w", parts[3], err)
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil {
		return nil, "", err
	}
	want, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil {
		return nil, "", err
	}
	check = func() error {
		got := argon2.IDKey([]byte(password), salt, t, m, p, uint32(len(want)))
		if subtle.ConstantTimeCompare(got, want) != 1 {
			return errors.New("argon2id: password does not match the stored hash")
		}
		return nil
	}
	if err := check(); err != nil {
		return nil, "", err
	}
	return check, fmt.Sprintf("argon2id m=%d KiB, t=%d, p=%d", m, t, p), nil
}

func oneDecimal(v float64) string {
	if v >= 100 {
		return thousands(v)
	}
	return fmt.Sprintf("%.1f", v)
}
