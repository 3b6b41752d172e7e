package main

import (
	"time"

	"github.com/acme/platform/pkg/servicecmd"
)

// envPrefix prefixes every variable: ACCOUNT_HTTP_ADDR and so on.
const envPrefix = "ACCOUNT"

// config is the whole configuration, from environment variables only. The
// defaults run the service locally beside a MongoDB on localhost.
type config struct {
	HTTPAddr        string        `envconfig:"HTTP_ADDR" default:":8080" desc:"listen address of the public API"`
	OpsAddr         string        `envconfig:"OPS_ADDR" default:":9090" desc:"listen address of /healthz, /readyz and /metrics"`
	MongoDBURI      string        `envconfig:"MONGODB_URI" default:"mongodb://localhost:27017" desc:"MongoDB connection string"`
	MongoDBDatabase string        `envconfig:"MONGODB_DATABASE" default:"account" desc:"MongoDB database of this service"`
	MongoDBTimeout  time.Duration `envconfig:"MONGODB_TIMEOUT" default:"3s" desc:"how long a request waits for an unreachable MongoDB before a 503"`
	Issuer          string        `envconfig:"ISSUER" default:"http://localhost:8080" desc:"public base URL of this service; the tokens' iss claim"`
	Audience        []string      `envconfig:"AUDIENCE" default:"acme-platform" desc:"comma-separated aud claim of issued tokens (and accepted on /definitions)"`
	TokenTTL        time.Duration `envconfig:"TOKEN_TTL" default:"1h" desc:"lifetime of id and access tokens (expires_in)"`
	RefreshTTL      time.Duration `envconfig:"REFRESH_TTL" default:"720h" desc:"lifetime of refresh tokens"`
	SigningAlg      string        `envconfig:"SIGNING_ALG" default:"RS256" desc:"algorithm of a generated signing key: RS256, ES256 or EdDSA"`
	KeyFiles        []string      `envconfig:"KEY_FILES" desc:"comma-separated PEM or JWK private key files; empty: generate one and keep it in MongoDB"`
	ActiveKeyID     string        `envconfig:"ACTIVE_KEY_ID" desc:"kid of the key file that signs; default the first file; the others are only published"`
	HashConcurrency int           `envconfig:"HASH_CONCURRENCY" default:"0" desc:"password hashes at once; 0 means the number of CPUs"`
	Argon2MemoryKiB uint32        `envconfig:"ARGON2_MEMORY_KIB" default:"19456" desc:"argon2id memory per hash for new passwords, KiB"`
	Argon2Time      uint32        `envconfig:"ARGON2_ITERATIONS" default:"2" desc:"argon2id iterations for new passwords"`
	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"15s" desc:"how long in-flight requests may take to finish after SIGTERM"`
}

func loadConfig() (config, error) {
	var cfg config
	err := servicecmd.LoadConfig(envPrefix, &cfg)
	return cfg, err
}
