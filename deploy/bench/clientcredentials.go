package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/account"
)

// benchClientScope is the scope of the bench's service client.
const benchClientScope = account.ScopeConversationsRead

// clientCredentialsRows measures POST /oauth2/token with the
// client_credentials grant over loopback against its floor: the check of
// the secret against the stored hash (account.HashClientSecret and a
// constant-time compare, as the service's client authentication does) plus
// one access token signed by pkg/token's Issuer.MintClient with a key of
// the service's algorithm, on the same cores.
//
// The HTTP side is sent by wrk (see wrkLoad) on as many connections as the
// floor has workers.
func clientCredentialsRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	id, secret, err := s.createClient(ctx, benchClientScope)
	if err != nil {
		return nil, err
	}
	stored, err := s.storedClient(ctx, id)
	if err != nil {
		return nil, err
	}
	signer, err := newBenchSigner(o.signingAlg)
	if err != nil {
		return nil, err
	}
	// One service client, as one backend with several instances would use.
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.accountURL+"/oauth2/token",
		strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode()))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	if err := checkTokenResponse(req); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "bench-wrk")
	if err != nil {
		return nil, err
	}
	s.cleanup = append(s.cleanup, func() { _ = os.RemoveAll(dir) })
	load, err := newWrkLoad(o.wrk, dir, req, o.workers)
	if err != nil {
		return nil, err
	}
	minted := token.Client{ClientID: id, AccountID: stored.AccountID, AccountName: stored.AccountName, Scopes: stored.Scopes}
	floor := func(ctx context.Context, _ int) error {
		if subtle.ConstantTimeCompare([]byte(stored.SecretHash), []byte(account.HashClientSecret(secret))) != 1 {
			return errors.New("the secret does not match the stored hash")
		}
		_, err := signer.issuer.MintClient(ctx, minted)
		return err
	}
	sides := []side{
		{name: "POST /oauth2/token", run: load.run, cpu: s.account.CPUTime, commands: s.accountCommands},
		{name: "secret hash + 1 signature", workers: o.workers, op: floor, cpu: selfCPU},
	}
	samples, err := alternate(ctx, o.rounds, o.serviceRun, sides...)
	if err != nil {
		return nil, fmt.Errorf("client credentials: %w", err)
	}
	if err := s.profile(ctx, s.account, sides[0], "client-credentials"); err != nil {
		return nil, err
	}
	tokens, floors := samples[0], samples[1]
	vsFloor := ratios(tokens, floors, throughputRatio)
	perCPU := ratios(tokens, floors, cpuEfficiencyRatio)
	perSecond := func(s []sample) string { return thousands(medianOf(s, sample.perSecond)) }
	cpu := func(s []sample) string {
		return fmt.Sprintf("%.2f ms CPU each", medianOf(s, func(s sample) float64 { return ms(s.cpuPerOp()) }))
	}
	title := fmt.Sprintf("Client credentials: POST /oauth2/token (%s keys), %d connections from wrk", o.signingAlg, o.workers)
	return []row{
		{
			measure: title + ", vs secret hash check + 1 signature",
			subject: fmt.Sprintf("%s tokens/s; peak RSS of the account process %.0f MiB", perSecond(tokens), s.account.PeakRSS()),
			against: perSecond(floors) + " floors/s (SHA-256 of the secret against the stored hash + `Issuer.MintClient`, " + o.signingAlg + ")",
			ratio:   vsFloor, unit: "× floor", target: "≥ 0.80", hasGoal: true, met: vsFloor.median >= 0.80, id: "client-credentials",
			cmds: cmdsCell(tokens, floors),
		},
		{
			measure: title + ", CPU per token of the account process vs per floor",
			subject: cpu(tokens) + " (the store's and the load generator's CPU not counted)",
			against: cpu(floors),
			ratio:   perCPU, unit: "× floor", id: "client-credentials", cmds: cmdsCell(tokens, floors),
		},
	}, nil
}

// checkTokenResponse sends req once with Go's client: the answer must be a
// token, so that what wrk counts are tokens (wrk itself only checks for 2xx).
func checkTokenResponse(req *http.Request) error {
	_, err := tokenResponse(http.DefaultClient, req)
	return err
}

// createClient creates a service client of the bench account with scopes
// (comma-separated) with the account binary's operator command and returns
// its id and secret.
func (s *stack) createClient(ctx context.Context, scopes string) (id, secret string, err error) {
	out, err := runTool(ctx, filepath.Join(s.bin, "account"), s.accountEnv, "",
		"create-client", "--account", benchAccount, "--name", fmt.Sprintf("bench-%d", time.Now().UnixNano()), "--scopes", scopes)
	if err != nil {
		return "", "", err
	}
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(line, "client_id: "); ok {
			id = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "client_secret: "); ok {
			secret = strings.TrimSpace(v)
		}
	}
	if id == "" || secret == "" {
		return "", "", fmt.Errorf("create-client printed no client_id and client_secret:\n%s", out)
	}
	return id, secret, nil
}

// clientCredentialsToken creates a service client with scopes
// (comma-separated) and returns an access token of it.
func (s *stack) clientCredentialsToken(ctx context.Context, client *http.Client, scopes string) (string, error) {
	id, secret, err := s.createClient(ctx, scopes)
	if err != nil {
		return "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.accountURL+"/oauth2/token",
		strings.NewReader(url.Values{"grant_type": {"client_credentials"}}.Encode()))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.SetBasicAuth(url.QueryEscape(id), url.QueryEscape(secret))
	return tokenResponse(client, req)
}

// storedClientDoc is what the floor needs of a stored service client.
type storedClientDoc struct {
	AccountID   string   `bson:"account_id"`
	AccountName string   `bson:"account_name"`
	Scopes      []string `bson:"scopes"`
	SecretHash  string   `bson:"secret_hash"`
}

// storedClient reads the client from the account database, so that the
// floor compares against exactly the stored hash and signs the claims the
// service signs.
func (s *stack) storedClient(ctx context.Context, clientID string) (storedClientDoc, error) {
	var doc storedClientDoc
	err := s.client.Database(s.accountDB).Collection("clients").FindOne(ctx, bson.D{{Key: "_id", Value: clientID}}).Decode(&doc)
	if err != nil {
		return doc, fmt.Errorf("read the stored client %s: %w", clientID, err)
	}
	return doc, nil
}

// benchSigner is a new key of one algorithm and an Issuer over it,
// configured as the account service configures its own (issuer and
// audience aside).
type benchSigner struct {
	key    jwk.Key
	keys   token.KeyringProvider // the key, for a JWKS
	issuer *token.Issuer
}

func newBenchSigner(alg string) (benchSigner, error) {
	key, err := token.GenerateKey(alg)
	if err != nil {
		return benchSigner{}, err
	}
	kr, err := token.NewKeyring(key)
	if err != nil {
		return benchSigner{}, err
	}
	keys := token.StaticKeyring(kr)
	issuer, err := token.NewIssuer(token.IssuerConfig{Issuer: benchIssuer, Audience: []string{benchAudience}, Keys: keys})
	if err != nil {
		return benchSigner{}, err
	}
	return benchSigner{key: key, keys: keys, issuer: issuer}, nil
}
