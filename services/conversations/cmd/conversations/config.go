package main

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/acme/platform/pkg/secretbox"
	"github.com/acme/platform/pkg/servicecmd"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/webhook/delivery"
)

// envPrefix prefixes every variable: CONVERSATIONS_HTTP_ADDR and so on.
const envPrefix = "CONVERSATIONS"

// config is the whole configuration, from environment variables only. The
// defaults run the service locally beside the account service of "make run"
// and a MongoDB on localhost.
type config struct {
	HTTPAddr string `envconfig:"HTTP_ADDR" default:":8081" desc:"listen address of the public API"`
	OpsAddr  string `envconfig:"OPS_ADDR" default:":9091" desc:"listen address of /healthz, /readyz and /metrics"`
	servicecmd.Config
	MongoDBDatabase        string        `envconfig:"MONGODB_DATABASE" default:"conversations" desc:"MongoDB database of this service"`
	JWKSURL                string        `envconfig:"JWKS_URL" default:"http://localhost:8080/.well-known/jwks.json" desc:"the account service's JWKS, fetched in the background"`
	Issuer                 string        `envconfig:"ISSUER" default:"http://localhost:8080" desc:"trusted token issuer (iss), the account service's ACCOUNT_ISSUER"`
	Audience               []string      `envconfig:"AUDIENCE" default:"acme-platform" desc:"comma-separated audiences; a token must carry one of them"`
	JWKSRefreshInterval    time.Duration `envconfig:"JWKS_REFRESH_INTERVAL" default:"5m" desc:"longest time between background refreshes of the JWKS"`
	JWKSMinRefreshInterval time.Duration `envconfig:"JWKS_MIN_REFRESH_INTERVAL" default:"30s" desc:"shortest time between refetches, also on an unknown kid"`
	DefaultPageSize        int           `envconfig:"DEFAULT_PAGE_SIZE" default:"10" desc:"page length when limit is absent"`
	MaxPageSize            int           `envconfig:"MAX_PAGE_SIZE" default:"100" desc:"largest accepted limit"`
	CursorSecret           string        `envconfig:"CURSOR_SECRET" desc:"key (32+ bytes) authenticating paging cursors; empty: generated once and kept in MongoDB"`
	EventsPollInterval     time.Duration `envconfig:"EVENTS_POLL_INTERVAL" default:"200ms" desc:"how often a replica looks for events to order (relay) and for new events of its open streams (one read per account with streams); changes on this replica wake both at once"`
	EventsRetention        time.Duration `envconfig:"EVENTS_RETENTION" default:"720h" desc:"how long events are kept (30 days); a feed position below what was purged is 410 cursor_expired"`
	EventsPurgeInterval    time.Duration `envconfig:"EVENTS_PURGE_INTERVAL" default:"1h" desc:"how often one replica (holding a lease in MongoDB) purges events older than the retention"`
	EventsKeepAlive        time.Duration `envconfig:"EVENTS_KEEPALIVE" default:"15s" desc:"longest silence of an event stream: a comment line is sent when nothing else was"`
	EventsMaxStreams       int           `envconfig:"EVENTS_MAX_STREAMS_PER_CALLER" default:"10" desc:"open event streams one caller may have on a replica; beyond it 429"`
	EventsStreamBytes      int64         `envconfig:"EVENTS_STREAM_BUFFER_BYTES" default:"262144" desc:"bytes of events one stream may hold unwritten; a stream at the head that holds more is dropped with retry: (it resumes with Last-Event-ID)"`
	EventsStreamsBytes     int64         `envconfig:"EVENTS_STREAMS_BUFFER_BYTES" default:"16777216" desc:"bytes of events all streams of a replica may hold unwritten; a stream's backlog is read page by page within it"`
	RelayPartitions        int           `envconfig:"RELAY_PARTITIONS" default:"16" desc:"partitions the accounts fall into for ordering their events (1 to 128, the same on every replica); each is leased to one replica at a time, which orders its accounts' events"`
	RelayWakeHost          string        `envconfig:"RELAY_WAKE_HOST" desc:"host name or IP at which the other replicas reach this replica's operations listener (at its port) to wake its relay when they record a change of an account it orders (in Kubernetes: the pod's IP); empty: the host of the operations address when it names one, else none"`
	RelayLease             time.Duration `envconfig:"RELAY_LEASE" default:"5s" desc:"how long a replica's lease of a relay partition holds without renewal (renewed every quarter of it): a replica that dies or stalls has its partitions taken over as it ends"`

	WebhookSecretKey           string        `envconfig:"WEBHOOK_SECRET_KEY" desc:"standard base64 of 32 bytes: the AES-256-GCM key that encrypts webhook secrets at rest (mount it from a Secret); empty: generated once and kept in MongoDB beside the secrets it protects (development only)"`
	WebhookAllowedCIDRs        []string      `envconfig:"WEBHOOK_ALLOWED_CIDRS" desc:"comma-separated ranges webhooks may be delivered to although they are not globally reachable (e.g. 127.0.0.0/8,::1/128 for a local receiver); empty: only globally reachable addresses"`
	WebhookAllowHTTP           bool          `envconfig:"WEBHOOK_ALLOW_HTTP" default:"false" desc:"accept plain http:// endpoint URLs (development); https only when false"`
	WebhookTimeout             time.Duration `envconfig:"WEBHOOK_TIMEOUT" default:"15s" desc:"how long a delivery attempt waits for a 2xx"`
	WebhookRetrySchedule       []string      `envconfig:"WEBHOOK_RETRY_SCHEDULE" default:"5s,5m,30m,2h,5h,10h,10h" desc:"comma-separated waits before each retry after a failed attempt (each ±20 %); the attempt after the last fails the delivery"`
	WebhookDisableAfter        time.Duration `envconfig:"WEBHOOK_DISABLE_AFTER" default:"120h" desc:"an endpoint failing without a single success for this long is disabled"`
	WebhookPollInterval        time.Duration `envconfig:"WEBHOOK_POLL_INTERVAL" default:"1s" desc:"how often a replica looks for due deliveries that no replica told it of (spaced out to 16 times it while it finds none), and a sixtieth of how often it sweeps its relay's accounts for events not fanned out; the events its relay orders are fanned out at once, a delivery it records claimed at once, a retry it recorded when due"`
	WebhookLease               time.Duration `envconfig:"WEBHOOK_LEASE" default:"0" desc:"how long a replica's claim on a delivery holds before another replica may take it; 0 means twice WEBHOOK_TIMEOUT plus 15s"`
	WebhookWorkers             int           `envconfig:"WEBHOOK_WORKERS" default:"64" desc:"delivery attempts one replica makes at once"`
	WebhookPerEndpoint         int           `envconfig:"WEBHOOK_PER_ENDPOINT" default:"4" desc:"delivery attempts one replica makes at once to one endpoint"`
	WebhookMaxEndpoints        int           `envconfig:"WEBHOOK_MAX_ENDPOINTS" default:"20" desc:"webhook endpoints per account"`
	WebhookManualPerMinute     int           `envconfig:"WEBHOOK_MANUAL_PER_MINUTE" default:"10" desc:"test and retry requests per endpoint and minute (each)"`
	WebhookDeliveriesRetention time.Duration `envconfig:"WEBHOOK_DELIVERIES_RETENTION" default:"720h" desc:"how long deliveries that ended (succeeded or failed) are kept after their last change (30 days); pending ones are never purged"`
	WebhookPurgeInterval       time.Duration `envconfig:"WEBHOOK_PURGE_INTERVAL" default:"1h" desc:"how often one replica (holding a lease in MongoDB) purges the deliveries older than the retention"`
}

// webhookSchedule parses WebhookRetrySchedule.
func (c config) webhookSchedule() ([]time.Duration, error) {
	var out []time.Duration
	for _, s := range c.WebhookRetrySchedule {
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("configuration: CONVERSATIONS_WEBHOOK_RETRY_SCHEDULE: %q is not a positive duration such as 5m", s)
		}
		out = append(out, d)
	}
	if len(out) == 0 {
		return nil, errors.New("configuration: CONVERSATIONS_WEBHOOK_RETRY_SCHEDULE must list at least one wait")
	}
	return out, nil
}

// webhookKey decodes WebhookSecretKey; nil when it is not set.
func (c config) webhookKey() ([]byte, error) {
	key, err := secretbox.ParseKey(c.WebhookSecretKey)
	if err != nil {
		return nil, fmt.Errorf("configuration: CONVERSATIONS_WEBHOOK_SECRET_KEY %w", err)
	}
	return key, nil

}

func loadConfig() (config, error) {
	var cfg config
	if err := servicecmd.LoadConfig(envPrefix, &cfg); err != nil {
		return cfg, err
	}
	return cfg, cfg.validate()
}

// validate checks what envconfig cannot. The cursor secret and the JWKS
// URL are checked where they are used, before the service listens.
func (c config) validate() error {
	if err := c.Config.Validate(envPrefix); err != nil {
		return err
	}
	if err := servicecmd.CheckTokenSettings(envPrefix+"_", c.Issuer, c.Audience); err != nil {
		return err
	}
	if c.DefaultPageSize < 1 || c.MaxPageSize < c.DefaultPageSize {
		return errors.New("configuration: need 1 <= CONVERSATIONS_DEFAULT_PAGE_SIZE <= CONVERSATIONS_MAX_PAGE_SIZE")
	}
	if c.EventsPollInterval <= 0 || c.EventsRetention <= 0 || c.EventsPurgeInterval <= 0 || c.EventsKeepAlive <= 0 || c.EventsKeepAlive > 15*time.Second {
		return errors.New("configuration: CONVERSATIONS_EVENTS_POLL_INTERVAL, _RETENTION and _PURGE_INTERVAL must be positive, CONVERSATIONS_EVENTS_KEEPALIVE from above 0 to 15s")
	}
	if c.EventsStreamBytes < 1024 || c.EventsStreamsBytes < c.EventsStreamBytes {
		return errors.New("configuration: CONVERSATIONS_EVENTS_STREAM_BUFFER_BYTES must be at least 1024 and at most CONVERSATIONS_EVENTS_STREAMS_BUFFER_BYTES")
	}
	if c.RelayPartitions < 1 || c.RelayPartitions > conversations.PendingSlots || c.RelayLease < 300*time.Millisecond {
		return fmt.Errorf("configuration: CONVERSATIONS_RELAY_PARTITIONS must be 1 to %d, CONVERSATIONS_RELAY_LEASE at least 300ms", conversations.PendingSlots)
	}
	if strings.ContainsAny(c.RelayWakeHost, "@/[]: ") && net.ParseIP(c.RelayWakeHost) == nil {
		return fmt.Errorf("configuration: CONVERSATIONS_RELAY_WAKE_HOST %q must be a host name or an IP address", c.RelayWakeHost)
	}
	if c.EventsMaxStreams < 1 {
		return errors.New("configuration: CONVERSATIONS_EVENTS_MAX_STREAMS_PER_CALLER must be at least 1")
	}
	if _, err := delivery.ParseAllowedCIDRs(c.WebhookAllowedCIDRs); err != nil {
		return fmt.Errorf("configuration: CONVERSATIONS_WEBHOOK_ALLOWED_CIDRS: %w", err)
	}
	if _, err := c.webhookSchedule(); err != nil {
		return err
	}
	if _, err := c.webhookKey(); err != nil {
		return err
	}
	if c.WebhookTimeout <= 0 || c.WebhookDisableAfter <= 0 || c.WebhookPollInterval <= 0 || c.WebhookLease < 0 ||
		c.WebhookDeliveriesRetention <= 0 || c.WebhookPurgeInterval <= 0 {
		return errors.New("configuration: CONVERSATIONS_WEBHOOK_TIMEOUT, _DISABLE_AFTER, _POLL_INTERVAL, _DELIVERIES_RETENTION and _PURGE_INTERVAL must be positive, _LEASE not negative")
	}
	if c.WebhookWorkers < 1 || c.WebhookPerEndpoint < 1 || c.WebhookMaxEndpoints < 1 || c.WebhookManualPerMinute < 1 {
		return errors.New("configuration: CONVERSATIONS_WEBHOOK_WORKERS, _PER_ENDPOINT, _MAX_ENDPOINTS and _MANUAL_PER_MINUTE must be at least 1")
	}
	return nil
}
