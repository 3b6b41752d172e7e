package main

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"go.mongodb.org/mongo-driver/v2/bson"
	"golang.org/x/crypto/argon2"

	"github.com/acme/platform/pkg/token"
)

// loginRow measures POST /login over loopback against bare argon2id
// verification of the same password with the parameters and salt stored
// for the user, at the same concurrency on the same cores.
func loginRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	client := loopbackClient(o.workers)
	bodies := make([]string, o.workers)
	for i := range o.workers {
		name, password := benchUser(i)
		b, _ := json.Marshal(map[string]string{"username": name, "password": password, "accountName": benchAccount})
		bodies[i] = string(b)
	}
	bare, floor, params, err := s.signInFloor(ctx)
	if err != nil {
		return nil, err
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
		{name: "POST /login", workers: o.workers, op: login, cpu: s.account.CPUTime, commands: s.accountCommands},
		{name: "argon2id", workers: o.workers, op: func(_ context.Context, w int) error { return bare[w]() }, cpu: selfCPU},
		{name: "argon2id + 3 signatures", workers: o.workers, op: floor},
	}
	samples, err := alternate(ctx, o.rounds, o.serviceRun, sides...)
	if err != nil {
		return nil, fmt.Errorf("login: %w", err)
	}
	if err := s.profile(ctx, s.account, sides[0], "login"); err != nil {
		return nil, err
	}
	logins, hashes, floors := samples[0], samples[1], samples[2]
	vsHash := ratios(logins, hashes, throughputRatio)
	vsFloor := ratios(logins, floors, throughputRatio)
	perCPU := ratios(logins, hashes, cpuEfficiencyRatio)
	rate := func(s []sample, what string) string {
		return oneDecimal(medianOf(s, sample.perSecond)) + " " + what + "/s"
	}
	cpu := func(s []sample) string {
		return fmt.Sprintf("%.1f ms CPU each", medianOf(s, func(s sample) float64 { return ms(s.cpuPerOp()) }))
	}
	title := fmt.Sprintf("Login: POST /login (%s keys), %d concurrent", o.signingAlg, o.workers)
	return []row{
		{
			measure: title + ", vs bare argon2id",
			subject: fmt.Sprintf("%s; peak RSS of the account process %.0f MiB", rate(logins, "logins"), s.account.PeakRSS()),
			against: rate(hashes, "verifications") + " (" + params + ")",
			ratio:   vsHash, unit: "× bare", target: "≥ 0.90", hasGoal: true, met: vsHash.median >= 0.90, id: "login",
			cmds: cmdsCell(logins, hashes),
		},
		{
			measure: title + ", vs argon2id + the 3 token signatures",
			subject: rate(logins, "logins"),
			against: rate(floors, "floors") + " (argon2id + 3 × " + o.signingAlg + " sign, the least any login under the contract does)",
			ratio:   vsFloor, unit: "× floor", id: "login", cmds: cmdsCell(logins, floors),
		},
		{
			measure: title + ", CPU per login of the account process vs per bare argon2id",
			subject: cpu(logins) + " (the store's and the load generator's CPU not counted)",
			against: cpu(hashes),
			ratio:   perCPU, unit: "× bare", id: "login", cmds: cmdsCell(logins, hashes),
		},
	}, nil
}

// signInFloor returns, per worker (each signs in as its own bench user),
// bare argon2id verification of the user's password with the parameters
// and salt stored for it, and the floor of a sign-in, the least one does:
// that verification plus the three signatures of the token set (access,
// refresh, id) with a key of the service's algorithm.
func (s *stack) signInFloor(ctx context.Context) (bare []func() error, floor func(context.Context, int) error, params string, err error) {
	bare = make([]func() error, s.o.workers)
	for i := range s.o.workers {
		name, password := benchUser(i)
		hash, err := s.storedHash(ctx, name)
		if err != nil {
			return nil, nil, "", err
		}
		if bare[i], params, err = bareArgon2id(hash, password); err != nil {
			return nil, nil, "", err
		}
	}
	sign, err := bareSigner(s.o.signingAlg)
	if err != nil {
		return nil, nil, "", err
	}
	floor = func(_ context.Context, w int) error {
		if err := bare[w](); err != nil {
			return err
		}
		for range 3 {
			if err := sign(); err != nil {
				return err
			}
		}
		return nil
	}
	return bare, floor, params, nil
}

// bareSigner signs a typical signing input once per call with the
// standard library and a new key of alg.
func bareSigner(alg string) (func() error, error) {
	key, err := token.GenerateKey(alg)
	if err != nil {
		return nil, err
	}
	var private any
	if err := jwk.Export(key, &private); err != nil {
		return nil, err
	}
	input := make([]byte, 600) // the size of our signing inputs
	switch k := private.(type) {
	case *rsa.PrivateKey:
		k.Precompute()
		return func() error {
			h := sha256.Sum256(input)
			_, err := rsa.SignPKCS1v15(nil, k, crypto.SHA256, h[:])
			return err
		}, nil
	case *ecdsa.PrivateKey:
		return func() error {
			h := sha256.Sum256(input)
			_, err := ecdsa.SignASN1(rand.Reader, k, h[:])
			return err
		}, nil
	case ed25519.PrivateKey:
		return func() error { _ = ed25519.Sign(k, input); return nil }, nil
	}
	return nil, fmt.Errorf("no bare signer for %T", private)
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
