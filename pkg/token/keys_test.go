package token_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/token/tokentest"
)

// rsaThumbprint computes the RFC 7638 thumbprint of an RSA public key by
// hand, independently of jwx: SHA-256 of {"e":...,"kty":"RSA","n":...}.
func rsaThumbprint(pub *rsa.PublicKey) string {
	b64 := base64.RawURLEncoding.EncodeToString
	e := big.NewInt(int64(pub.E)).Bytes()
	canonical := `{"e":"` + b64(e) + `","kty":"RSA","n":"` + b64(pub.N.Bytes()) + `"}`
	sum := sha256.Sum256([]byte(canonical))
	return b64(sum[:])
}

func checkSigningKey(t *testing.T, k jwk.Key, wantAlg string) {
	t.Helper()
	if private, err := jwk.IsPrivateKey(k); err != nil || !private {
		t.Errorf("key is not private (%v)", err)
	}
	if a, ok := k.Algorithm(); !ok || a.String() != wantAlg {
		t.Errorf("alg = %v, want %s", a, wantAlg)
	}
	if u, ok := k.KeyUsage(); !ok || u != "sig" {
		t.Errorf("use = %q, want sig", u)
	}
	kid := kidOf(t, k)
	if len(kid) != 43 || strings.ContainsAny(kid, "+/=") {
		t.Errorf("kid %q is not a base64url SHA-256", kid)
	}
	if pub, ok := tokentest.RawKey(t, k).(*rsa.PrivateKey); ok {
		if want := rsaThumbprint(&pub.PublicKey); kid != want {
			t.Errorf("kid = %s, independent RFC 7638 thumbprint = %s", kid, want)
		}
	}
}

func TestGenerateKey(t *testing.T) {
	t.Parallel()
	for _, alg := range algs() {
		k, err := token.GenerateKey(alg)
		if err != nil {
			t.Fatalf("%s: %v", alg, err)
		}
		checkSigningKey(t, k, alg)
		switch raw := tokentest.RawKey(t, k).(type) {
		case *rsa.PrivateKey:
			if raw.N.BitLen() != 2048 {
				t.Errorf("RSA key of %d bits", raw.N.BitLen())
			}
		case *ecdsa.PrivateKey:
			if raw.Curve != elliptic.P256() {
				t.Errorf("curve %s", raw.Curve.Params().Name)
			}
		case ed25519.PrivateKey:
		default:
			t.Errorf("%s: raw key %T", alg, raw)
		}
	}
	k, err := token.GenerateKey("")
	if err != nil {
		t.Fatal(err)
	}
	checkSigningKey(t, k, token.AlgRS256)
	for _, alg := range []string{"HS256", "none", "ES384", "rs256"} {
		if _, err := token.GenerateKey(alg); err == nil {
			t.Errorf("GenerateKey(%q) succeeded", alg)
		}
	}
}

// TestThumbprintRFC7638Example checks kids against the worked example of
// RFC 7638 section 3.1 (a public key, so it goes in as a published key).
func TestThumbprintRFC7638Example(t *testing.T) {
	t.Parallel()
	pub, err := jwk.ParseKey([]byte(`{"kty":"RSA","e":"AQAB","kid":"2011-04-29","n":"0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw"}`))
	if err != nil {
		t.Fatal(err)
	}
	active, _ := token.GenerateKey(token.AlgEdDSA)
	kr, err := token.NewKeyring(active, pub)
	if err != nil {
		t.Fatal(err)
	}
	k, ok := kr.PublicSet().Key(1)
	if !ok {
		t.Fatal("published key missing")
	}
	if kid := kidOf(t, k); kid != "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs" {
		t.Errorf("kid = %s, RFC 7638 says NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs", kid)
	}
}

func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func pemBytes(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func TestLoadKeyFilePEM(t *testing.T) {
	t.Parallel()
	rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	ecKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, edKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8 := func(k any) []byte {
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return der
	}
	sec1, err := x509.MarshalECPrivateKey(ecKey)
	if err != nil {
		t.Fatal(err)
	}
	ecParams := pemBytes("EC PARAMETERS", []byte{0x06, 0x08, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07})

	for _, tc := range []struct {
		name string
		data []byte
		alg  string
	}{
		{"PKCS#1 RSA", pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(rsaKey)), token.AlgRS256},
		{"PKCS#8 RSA", pemBytes("PRIVATE KEY", pkcs8(rsaKey)), token.AlgRS256},
		{"PKCS#8 EC", pemBytes("PRIVATE KEY", pkcs8(ecKey)), token.AlgES256},
		{"PKCS#8 Ed25519", pemBytes("PRIVATE KEY", pkcs8(edKey)), token.AlgEdDSA},
		{"SEC1 EC", pemBytes("EC PRIVATE KEY", sec1), token.AlgES256},
		{"SEC1 EC after EC PARAMETERS (openssl ecparam -genkey)", append(ecParams, pemBytes("EC PRIVATE KEY", sec1)...), token.AlgES256},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, err := token.LoadKeyFile(writeFile(t, "key.pem", tc.data))
			if err != nil {
				t.Fatal(err)
			}
			checkSigningKey(t, k, tc.alg)
			if tc.alg == token.AlgRS256 && kidOf(t, k) != rsaThumbprint(&rsaKey.PublicKey) {
				t.Error("kid is not the thumbprint of the file's key")
			}
			// The loaded key signs tokens that verify.
			kr, err := token.NewKeyring(k)
			if err != nil {
				t.Fatal(err)
			}
			if kr.KeyID() != kidOf(t, k) || kr.Algorithm() != tc.alg {
				t.Errorf("keyring kid/alg = %s/%s", kr.KeyID(), kr.Algorithm())
			}
		})
	}
}

func TestLoadKeyFileJWK(t *testing.T) {
	t.Parallel()
	for _, alg := range algs() {
		t.Run(alg, func(t *testing.T) {
			k, err := token.GenerateKey(alg)
			if err != nil {
				t.Fatal(err)
			}
			data, err := token.MarshalPrivateJWK(k)
			if err != nil {
				t.Fatal(err)
			}
			loaded, err := token.LoadKeyFile(writeFile(t, "key.jwk", data))
			if err != nil {
				t.Fatal(err)
			}
			checkSigningKey(t, loaded, alg)
			if kidOf(t, loaded) != kidOf(t, k) {
				t.Error("kid changed through a JWK file")
			}
			back, err := token.ParsePrivateJWK(data)
			if err != nil {
				t.Fatal(err)
			}
			if !jwk.Equal(back, k) {
				t.Error("ParsePrivateJWK(MarshalPrivateJWK(k)) != k")
			}
		})
	}
}

func TestParseKeyInfersOrChecksAlg(t *testing.T) {
	t.Parallel()
	k, _ := token.GenerateKey(token.AlgES256)
	data, _ := token.MarshalPrivateJWK(k)
	// Without "alg", the key type decides.
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	delete(m, "alg")
	m["kid"] = "someone-elses-kid"
	stripped, _ := json.Marshal(m)
	got, err := token.ParseKey(stripped, "")
	if err != nil {
		t.Fatal(err)
	}
	checkSigningKey(t, got, token.AlgES256)
	if kidOf(t, got) != kidOf(t, k) {
		t.Error("a kid in the file overrode the thumbprint")
	}
	if _, err := token.ParseKey(stripped, token.AlgRS256); err == nil {
		t.Error("RS256 accepted for an EC key")
	}
	if _, err := token.ParseKey(data, token.AlgEdDSA); err == nil {
		t.Error("alg argument contradicting the JWK's alg accepted")
	}
}

func TestParseKeyRejects(t *testing.T) {
	t.Parallel()
	small, err := rsa.GenerateKey(rand.Reader, 1024)
	if err != nil {
		t.Fatal(err)
	}
	p384, err := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	p384der, _ := x509.MarshalECPrivateKey(p384)
	ok, _ := token.GenerateKey(token.AlgRS256)
	pub, _ := ok.PublicKey()
	pubJSON, _ := json.Marshal(pub)
	okRaw := tokentest.RawKey(t, ok).(*rsa.PrivateKey)
	pkix, _ := x509.MarshalPKIXPublicKey(&okRaw.PublicKey)
	two := append(pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(okRaw)), pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(okRaw))...)
	encrypted := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Headers: map[string]string{"Proc-Type": "4,ENCRYPTED", "DEK-Info": "AES-256-CBC,00"}, Bytes: []byte{1, 2, 3}})

	for name, data := range map[string][]byte{
		"RSA 1024 PEM":        pemBytes("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(small)),
		"EC P-384":            pemBytes("EC PRIVATE KEY", p384der),
		"symmetric JWK":       []byte(`{"kty":"oct","k":"c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3JldA"}`),
		"public JWK":          pubJSON,
		"public key PEM":      pemBytes("PUBLIC KEY", pkix),
		"two keys":            two,
		"encrypted PEM":       encrypted,
		"garbage":             []byte("hello"),
		"broken JSON":         []byte(`{"kty":"RSA","d":"c2VjcmV0`),
		"broken PEM":          []byte("-----BEGIN RSA PRIVATE KEY-----\nAAAA\n-----END RSA PRIVATE KEY-----\n"),
		"JWKS instead of JWK": []byte(`{"keys":[]}`),
	} {
		if k, err := token.ParseKey(data, ""); err == nil {
			t.Errorf("%s: accepted (%v)", name, k)
		} else if strings.Contains(err.Error(), "c2VjcmV0") {
			t.Errorf("%s: error %q echoes key material", name, err)
		}
	}
	if _, err := token.MarshalPrivateJWK(pub); err == nil {
		t.Error("MarshalPrivateJWK accepted a public key")
	}
	if _, err := token.LoadKeyFile(filepath.Join(t.TempDir(), "missing.pem")); err == nil {
		t.Error("LoadKeyFile of a missing file succeeded")
	}
}

func TestKeyringRejectsBadKeys(t *testing.T) {
	t.Parallel()
	priv, _ := token.GenerateKey(token.AlgRS256)
	pub, _ := priv.PublicKey()
	if _, err := token.NewKeyring(pub); err == nil {
		t.Error("public key accepted as the active key")
	}
	if _, err := token.NewKeyring(nil); err == nil {
		t.Error("nil active key accepted")
	}
	sym, err := jwk.Import([]byte("0123456789abcdef0123456789abcdef"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := token.NewKeyring(priv, sym); err == nil {
		t.Error("symmetric key published")
	}
	// The same key twice is published once.
	kr, err := token.NewKeyring(priv, pub, priv)
	if err != nil {
		t.Fatal(err)
	}
	if n := kr.PublicSet().Len(); n != 1 {
		t.Errorf("public set has %d keys, want 1", n)
	}
}

func TestServeJWKSPublishesPublicKeysOnly(t *testing.T) {
	t.Parallel()
	var keys []jwk.Key
	for _, alg := range algs() {
		k, err := token.GenerateKey(alg)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	// Every key given private, including the retired ones.
	kr, err := token.NewKeyring(keys[0], keys[1:]...)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(jwksHandler(token.StaticKeyring(kr)))
	defer srv.Close()
	res, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusOK ||
		res.Header.Get("Content-Type") != "application/jwk-set+json" ||
		res.Header.Get("Cache-Control") != "public, max-age=300" {
		t.Errorf("status %d, headers %v", res.StatusCode, res.Header)
	}
	var doc struct {
		Keys []map[string]any `json:"keys"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Keys) != 3 {
		t.Fatalf("%d keys published, want 3", len(doc.Keys))
	}
	for i, k := range doc.Keys {
		for _, private := range []string{"d", "p", "q", "dp", "dq", "qi", "oth", "k"} {
			if _, ok := k[private]; ok {
				t.Errorf("key %d publishes private member %q", i, private)
			}
		}
		if k["kid"] != kidOf(t, keys[i]) || k["use"] != "sig" || k["alg"] != algs()[i] {
			t.Errorf("key %d = %v", i, k)
		}
	}
	if string(body) != string(kr.JWKS()) {
		t.Error("handler body differs from Keyring.JWKS")
	}
}

// jwksHandler serves p's JWKS as a service's route does, for the tests'
// servers: a missing keyring is a 503.
func jwksHandler(p token.KeyringProvider) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := token.ServeJWKS(w, r, p); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
		}
	})
}
