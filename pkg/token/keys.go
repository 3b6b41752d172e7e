package token

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// Signing algorithms: the only three a key of this package signs with.
const (
	AlgRS256 = "RS256" // RSASSA-PKCS1-v1_5 with SHA-256, 2048-bit key at least
	AlgES256 = "ES256" // ECDSA on P-256 with SHA-256
	AlgEdDSA = "EdDSA" // Ed25519

	// DefaultAlgorithm is RS256: the widest client support and the cheapest
	// to verify.
	DefaultAlgorithm = AlgRS256
)

// minRSABits is the smallest RSA modulus accepted, for signing and for
// verifying (NIST SP 800-57: 2048 bits until 2030).
const minRSABits = 2048

// GenerateKey returns a new private signing key for alg (AlgRS256 when alg
// is empty): a 2048-bit RSA key, a P-256 key or an Ed25519 key. The key has
// "alg", "use"="sig" and "kid" (its RFC 7638 thumbprint) set.
func GenerateKey(alg string) (jwk.Key, error) {
	if alg == "" {
		alg = DefaultAlgorithm
	}
	var raw any
	var err error
	switch alg {
	case AlgRS256:
		raw, err = rsa.GenerateKey(rand.Reader, minRSABits)
	case AlgES256:
		raw, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case AlgEdDSA:
		_, raw, err = ed25519.GenerateKey(rand.Reader)
	default:
		return nil, fmt.Errorf("generate key: unsupported algorithm %q (want %s, %s or %s)", alg, AlgRS256, AlgES256, AlgEdDSA)
	}
	if err != nil {
		return nil, fmt.Errorf("generate %s key: %w", alg, err)
	}
	key, err := signingKeyFromRaw(raw, alg)
	if err != nil {
		return nil, fmt.Errorf("generate %s key: %w", alg, err)
	}
	return key, nil
}

// LoadKeyFile reads a private signing key from a PEM or JWK file (see
// ParseKey). The algorithm comes from the JWK's "alg" or, when absent, from
// the key type.
func LoadKeyFile(path string) (jwk.Key, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load key file: %w", err)
	}
	key, err := ParseKey(data, "")
	if err != nil {
		return nil, fmt.Errorf("load key file %s: %w", path, err)
	}
	return key, nil
}

// ParseKey parses a private signing key: PEM (PKCS#1 "RSA PRIVATE KEY",
// PKCS#8 "PRIVATE KEY" or SEC1 "EC PRIVATE KEY") or a JWK JSON object with
// its private members.
//
// alg may be empty: it is then taken from the JWK's "alg" or inferred from
// the key type (RSA: RS256, EC P-256: ES256, Ed25519: EdDSA). An alg that
// does not fit the key, an RSA key under 2048 bits, a symmetric key and a
// public key are refused. The returned key is rebuilt from the key material
// alone (other members of a JWK are dropped) with "alg", "use"="sig" and
// "kid" = RFC 7638 thumbprint: a kid in the input is ignored, so that every
// replica derives the same kid from the same key.
func ParseKey(data []byte, alg string) (jwk.Key, error) {
	trimmed := bytes.TrimSpace(data)
	switch {
	case bytes.HasPrefix(trimmed, []byte("{")):
		return parseJWK(trimmed, alg)
	case bytes.Contains(trimmed, []byte("-----BEGIN")):
		raw, err := parsePEMPrivateKey(trimmed)
		if err != nil {
			return nil, err
		}
		return signingKeyFromRaw(raw, alg)
	default:
		return nil, errors.New("parse key: neither a PEM block nor a JWK JSON object")
	}
}

// MarshalPrivateJWK returns the JSON form of a private signing key,
// private members included, so that a generated key can be stored (e.g. in
// MongoDB) and read back with ParsePrivateJWK. The result is secret.
func MarshalPrivateJWK(key jwk.Key) ([]byte, error) {
	if key == nil {
		return nil, errors.New("marshal private JWK: nil key")
	}
	if private, err := jwk.IsPrivateKey(key); err != nil || !private {
		return nil, errors.New("marshal private JWK: not an asymmetric private key")
	}
	data, err := json.Marshal(key)
	if err != nil {
		// The cause is not wrapped: encoders may quote the value they
		// failed on, and this value is a private key.
		return nil, errors.New("marshal private JWK: cannot encode key")
	}
	return data, nil
}

// ParsePrivateJWK is the inverse of MarshalPrivateJWK. It applies the same
// checks as ParseKey and takes the algorithm from the JWK's "alg" (or the
// key type).
func ParsePrivateJWK(data []byte) (jwk.Key, error) {
	return parseJWK(bytes.TrimSpace(data), "")
}

func parseJWK(data []byte, alg string) (jwk.Key, error) {
	key, err := jwk.ParseKey(data)
	if err != nil {
		// Not wrapped on purpose: a JSON error may echo part of the input,
		// which is private key material, and errors end up in logs.
		return nil, errors.New("parse JWK: not a valid JSON Web Key")
	}
	if key.KeyType() == jwa.OctetSeq() {
		return nil, errors.New("parse JWK: symmetric keys are not accepted, an asymmetric private key is required")
	}
	if ka, ok := key.Algorithm(); ok && ka.String() != "" {
		if alg != "" && alg != ka.String() {
			return nil, fmt.Errorf("parse JWK: the key is for %q, not %q", ka.String(), alg)
		}
		alg = ka.String()
	}
	private, err := jwk.IsPrivateKey(key)
	if err != nil || !private {
		return nil, errors.New("parse JWK: a private key is required")
	}
	var raw any
	if err := jwk.Export(key, &raw); err != nil {
		return nil, fmt.Errorf("parse JWK: export key material: %w", err)
	}
	return signingKeyFromRaw(raw, alg)
}

// parsePEMPrivateKey returns the one private key of a PEM file. An
// "EC PARAMETERS" block, which `openssl ecparam -genkey` writes before the
// key, is skipped.
func parsePEMPrivateKey(data []byte) (any, error) {
	var found any
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if _, encrypted := block.Headers["Proc-Type"]; encrypted {
			return nil, errors.New("parse PEM: encrypted keys are not supported")
		}
		var raw any
		var err error
		switch block.Type {
		case "EC PARAMETERS":
			continue
		case "RSA PRIVATE KEY":
			raw, err = x509.ParsePKCS1PrivateKey(block.Bytes)
		case "PRIVATE KEY":
			raw, err = x509.ParsePKCS8PrivateKey(block.Bytes)
		case "EC PRIVATE KEY":
			raw, err = x509.ParseECPrivateKey(block.Bytes)
		case "ENCRYPTED PRIVATE KEY":
			return nil, errors.New("parse PEM: encrypted keys are not supported")
		case "PUBLIC KEY", "RSA PUBLIC KEY", "CERTIFICATE":
			return nil, fmt.Errorf("parse PEM: found %q, a private key is required", block.Type)
		default:
			return nil, fmt.Errorf("parse PEM: unsupported block type %q", block.Type)
		}
		if err != nil {
			return nil, fmt.Errorf("parse PEM %q block: %w", block.Type, err)
		}
		if found != nil {
			return nil, errors.New("parse PEM: more than one private key; put each key in its own file")
		}
		found = raw
	}
	if found == nil {
		return nil, errors.New("parse PEM: no private key block found")
	}
	return found, nil
}

// signingKeyFromRaw turns a raw private key into a clean jwk.Key for alg
// (inferred when empty) with alg, use and kid set.
func signingKeyFromRaw(raw any, alg string) (jwk.Key, error) {
	var pub any
	switch k := raw.(type) {
	case *rsa.PrivateKey:
		pub = &k.PublicKey
	case *ecdsa.PrivateKey:
		pub = &k.PublicKey
	case ed25519.PrivateKey:
		pub = k.Public()
	default:
		return nil, fmt.Errorf("unsupported private key type %s (want RSA, ECDSA P-256 or Ed25519)", keyKind(raw))
	}
	if alg == "" {
		inferred, err := inferAlgorithm(pub)
		if err != nil {
			return nil, err
		}
		alg = inferred
	}
	if !isSigningAlgorithm(alg) {
		return nil, fmt.Errorf("unsupported signing algorithm %q (want %s, %s or %s)", alg, AlgRS256, AlgES256, AlgEdDSA)
	}
	if err := checkKeyForAlgorithm(alg, pub); err != nil {
		return nil, err
	}
	key, err := jwk.Import(raw)
	if err != nil {
		return nil, fmt.Errorf("import private key: %w", err)
	}
	if err := setKeyMetadata(key, alg); err != nil {
		return nil, err
	}
	return key, nil
}

// publicJWK returns a fresh public jwk.Key built from the public key
// material of key alone, so that no private member and no extra member of
// the source can ever reach a published key set.
func publicJWK(key jwk.Key, alg string) (jwk.Key, error) {
	pub, err := jwk.PublicRawKeyOf(key)
	if err != nil {
		return nil, fmt.Errorf("derive public key: %w", err)
	}
	if alg == "" {
		if ka, ok := key.Algorithm(); ok && ka.String() != "" {
			alg = ka.String()
		} else if alg, err = inferAlgorithm(pub); err != nil {
			return nil, err
		}
	}
	if !isSigningAlgorithm(alg) {
		return nil, fmt.Errorf("unsupported signing algorithm %q", alg)
	}
	if err := checkKeyForAlgorithm(alg, pub); err != nil {
		return nil, err
	}
	pk, err := jwk.Import(pub)
	if err != nil {
		return nil, fmt.Errorf("import public key: %w", err)
	}
	if err := setKeyMetadata(pk, alg); err != nil {
		return nil, err
	}
	return pk, nil
}

// setKeyMetadata sets alg, use=sig and kid = RFC 7638 thumbprint.
func setKeyMetadata(key jwk.Key, alg string) error {
	sa, ok := jwa.LookupSignatureAlgorithm(alg)
	if !ok {
		return fmt.Errorf("unknown algorithm %q", alg)
	}
	kid, err := thumbprint(key)
	if err != nil {
		return err
	}
	if err := key.Set(jwk.AlgorithmKey, sa); err != nil {
		return fmt.Errorf("set alg: %w", err)
	}
	if err := key.Set(jwk.KeyUsageKey, jwk.ForSignature); err != nil {
		return fmt.Errorf("set use: %w", err)
	}
	if err := key.Set(jwk.KeyIDKey, kid); err != nil {
		return fmt.Errorf("set kid: %w", err)
	}
	return nil
}

// thumbprint is the RFC 7638 SHA-256 thumbprint of the public part of key,
// base64url without padding: the kid of every key of this package.
func thumbprint(key jwk.Key) (string, error) {
	sum, err := key.Thumbprint(crypto.SHA256)
	if err != nil {
		return "", fmt.Errorf("compute key thumbprint: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(sum), nil
}

func isSigningAlgorithm(alg string) bool {
	return alg == AlgRS256 || alg == AlgES256 || alg == AlgEdDSA
}

// inferAlgorithm maps a public key to the one algorithm this package signs
// with for that key type.
func inferAlgorithm(pub any) (string, error) {
	switch k := pub.(type) {
	case *rsa.PublicKey:
		return AlgRS256, nil
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() {
			return AlgES256, nil
		}
		return "", fmt.Errorf("unsupported EC curve %s (want P-256)", k.Curve.Params().Name)
	case ed25519.PublicKey:
		return AlgEdDSA, nil
	default:
		return "", fmt.Errorf("unsupported key type %s (want RSA, EC P-256 or Ed25519)", keyKind(pub))
	}
}

// checkKeyForAlgorithm reports whether pub can verify signatures of alg. It
// covers every asymmetric JWS algorithm a Verifier may be configured with.
func checkKeyForAlgorithm(alg string, pub any) error {
	switch alg {
	case "RS256", "RS384", "RS512", "PS256", "PS384", "PS512":
		k, ok := pub.(*rsa.PublicKey)
		if !ok {
			return fmt.Errorf("algorithm %s needs an RSA key, not %s", alg, keyKind(pub))
		}
		if bits := k.N.BitLen(); bits < minRSABits {
			return fmt.Errorf("RSA key of %d bits is too small (minimum %d)", bits, minRSABits)
		}
		return nil
	case "ES256", "ES384", "ES512":
		want := curveFor(alg)
		k, ok := pub.(*ecdsa.PublicKey)
		if !ok || k.Curve != want {
			return fmt.Errorf("algorithm %s needs an EC %s key, not %s", alg, want.Params().Name, keyKind(pub))
		}
		return nil
	case "EdDSA":
		if _, ok := pub.(ed25519.PublicKey); !ok {
			return fmt.Errorf("algorithm %s needs an Ed25519 key, not %s", alg, keyKind(pub))
		}
		return nil
	default:
		return fmt.Errorf("unsupported algorithm %q", alg)
	}
}

func curveFor(alg string) elliptic.Curve {
	switch alg {
	case "ES384":
		return elliptic.P384()
	case "ES512":
		return elliptic.P521()
	default:
		return elliptic.P256()
	}
}

// keyKind names a key type for error messages without printing the key.
func keyKind(k any) string {
	switch k := k.(type) {
	case *rsa.PublicKey, *rsa.PrivateKey:
		return "RSA"
	case *ecdsa.PublicKey:
		return "EC " + k.Curve.Params().Name
	case *ecdsa.PrivateKey:
		return "EC " + k.Curve.Params().Name
	case ed25519.PublicKey, ed25519.PrivateKey:
		return "Ed25519"
	case []byte:
		return "symmetric"
	default:
		return fmt.Sprintf("%T", k)
	}
}
