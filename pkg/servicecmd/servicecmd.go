// Package servicecmd is what every service binary's cmd/ does the same way:
// Main, the configuration both services share (Config) read from
// environment variables (envconfig) with a usage table, a JSON logger, the
// MongoDB connection (DialMongo), and Service.Run, which serves the API and
// the operations listener, initialises in the background, and drains on
// shutdown.
package servicecmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/tracing/tracingsdk"
	"github.com/acme/platform/pkg/web"
)

// Main runs a service binary's run with a context cancelled by SIGTERM
// or Ctrl-C, and exits 1 with the error, prefixed by name, when it fails.
func Main(name string, run func(ctx context.Context) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

// Config is the configuration both services share, embedded in each
// one's own: envconfig reads its variables with the service's prefix.
type Config struct {
	OpsPprof        bool          `envconfig:"OPS_PPROF" default:"false" desc:"serve net/http/pprof under /debug/pprof/ on the operations listener; keep that port private"`
	MongoDBURI      string        `envconfig:"MONGODB_URI" default:"mongodb://localhost:27017" desc:"MongoDB connection string"`
	MongoDBTimeout  time.Duration `envconfig:"MONGODB_TIMEOUT" default:"3s" desc:"the deadline of each request for all its MongoDB commands, then a 503; /readyz fails once MongoDB has answered nothing for as long"`
	MaxInFlight     int           `envconfig:"MAX_IN_FLIGHT" default:"0" desc:"API requests one replica works on at once; beyond it a request gets 503 overloaded at once; 0 means the size of the MongoDB connection pool (maxPoolSize of MONGODB_URI, default 100)"`
	LogLevel        string        `envconfig:"LOG_LEVEL" default:"info" desc:"debug, info, warn or error"`
	ShutdownTimeout time.Duration `envconfig:"SHUTDOWN_TIMEOUT" default:"15s" desc:"how long in-flight requests may take to finish after SIGTERM"`
	CORSOrigins     []string      `envconfig:"CORS_ORIGINS" desc:"comma-separated origins (scheme://host[:port]) whose web pages may call the API from a browser, or * for any; empty: none"`
}

// Validate checks what envconfig cannot of c; prefix (ACCOUNT,
// CONVERSATIONS) names the variables in the message.
func (c Config) Validate(prefix string) error {
	if c.MaxInFlight < 0 {
		return fmt.Errorf("configuration: %s_MAX_IN_FLIGHT must not be negative", prefix)
	}
	if _, err := web.ParseCORSOrigins(c.CORSOrigins); err != nil {
		return fmt.Errorf("configuration: %s_CORS_ORIGINS: %w", prefix, err)
	}
	return nil
}

// Configure returns s with what c configures: profiling, the drain, the
// bound of requests in flight and each request's database budget (the
// MongoDB timeout).
func (c Config) Configure(s Service) Service {
	s.Profiling = c.OpsPprof
	s.Drain = c.ShutdownTimeout
	s.MaxInFlight = MaxInFlight(c.MaxInFlight, c.MongoDBURI)
	s.RequestBudget = c.MongoDBTimeout
	return s
}

// LoadConfig fills spec from the process environment (envconfig reads
// os.Getenv, so tests set variables with t.Setenv).
func LoadConfig(prefix string, spec any) error {
	if err := envconfig.Process(prefix, spec); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	return nil
}

// PrintUsage writes a table of every variable of spec: name, default and
// the `desc` tag.
func PrintUsage(w io.Writer, prefix string, spec any) error {
	tw := tabwriter.NewWriter(w, 1, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  VARIABLE\tDEFAULT\tDESCRIPTION")
	err := envconfig.Usagef(prefix, spec, tw,
		"{{range .}}  {{usage_key .}}\t{{usage_default .}}\t{{usage_description .}}\n{{end}}")
	if err != nil {
		return fmt.Errorf("print configuration: %w", err)
	}
	return tw.Flush()
}

// CheckTokenSettings checks the token settings both services share: the
// issuer is an absolute http(s) URL (the tokens' iss, and where clients
// find the discovery document), and the audience lists at least one name
// and no blank one. prefix names the variables in the message.
func CheckTokenSettings(prefix, issuer string, audience []string) error {
	u, err := url.Parse(issuer)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("configuration: %sISSUER %q must be an absolute http(s) URL (the issuer)", prefix, issuer)
	}
	if len(audience) == 0 || slices.ContainsFunc(audience, func(a string) bool { return strings.TrimSpace(a) == "" }) {
		return fmt.Errorf("configuration: %sAUDIENCE must list at least one audience and no blank one", prefix)
	}
	return nil
}

// NewLogger returns a JSON logger at level (debug, info, warn, error;
// anything else means info).
func NewLogger(w io.Writer, level string) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToUpper(level))); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l}))
}

// Service describes one service process.
type Service struct {
	Name    string
	Version string
	Logger  *slog.Logger
	// APIAddr and OpsAddr are the listen addresses of the public API and of
	// /healthz, /readyz and /metrics.
	APIAddr, OpsAddr string
	// Drain is how long in-flight requests may take after shutdown begins.
	Drain time.Duration
	// Registry receives the process's metrics and is served at /metrics.
	Registry *prometheus.Registry
	// Checks must all pass for /readyz to be 200. Run adds "initialised".
	Checks map[string]web.Check
	// Profiling serves net/http/pprof on the operations listener.
	Profiling bool
	// Ops are more routes of the operations listener, by ServeMux
	// pattern: calls between a service's replicas, never public.
	Ops map[string]http.Handler
	// MaxInFlight bounds the API requests worked on at once; the excess
	// gets the overloaded 503 at once (web.LimitInFlight). 0: no bound.
	MaxInFlight int
	// RequestBudget is each API request's deadline (web.Budget), the
	// service's MongoDB timeout: all of a request's database commands
	// together wait that long for a database that does not answer, then
	// the request gets its 503. 0: no deadline.
	RequestBudget time.Duration
	// Init builds the API handler from what lives in the database
	// (indexes, keys); validate the configuration before Run, so that a
	// mistake in it ends the process before it listens. Run retries Init
	// with backoff (0.5 s doubling to 10 s) while it fails because the
	// database is unreachable (an error wrapping problem.ErrUnavailable, as
	// pkg/mongoconn classifies driver errors), so that a database that starts
	// later than the service causes no crash loop (likewise while no pooled
	// connection comes free in time, problem.ErrOverloaded); meanwhile the API
	// answers 503 and /readyz is not ready. Any other error ends Run at
	// once: retrying cannot fix it.
	Init func(ctx context.Context) (http.Handler, error)
}

// Run serves until ctx is cancelled (SIGTERM), then drains and returns nil,
// or returns the first listener or permanent initialisation error. It sets
// up tracing from the OTEL_* variables first (see pkg/tracing/tracingsdk:
// off without an exporter), and flushes the spans left when it returns.
func (s Service) Run(ctx context.Context) error {
	stopTracing, err := tracingsdk.Setup(ctx, s.Name, s.Version)
	if err != nil {
		return err
	}
	defer func() {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if err := stopTracing(flushCtx); err != nil {
			s.Logger.Warn("flush traces", "error", err.Error())
		}
	}()
	apiListener, err := web.Listen(s.APIAddr)
	if err != nil {
		return err
	}
	opsListener, err := web.Listen(s.OpsAddr)
	if err != nil {
		_ = apiListener.Close()
		return err
	}

	observe := web.Config{Logger: s.Logger, Metrics: s.Registry}
	api := web.NewPending(observe)
	checks := map[string]web.Check{"initialised": func(context.Context) error {
		if !api.IsReady() {
			return errors.New("initialising")
		}
		return nil
	}}
	for name, check := range s.Checks {
		checks[name] = check
	}

	serveCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		h, err := s.initialise(serveCtx)
		if err != nil {
			cancel(err)
			return
		}
		api.Ready(h)
		s.Logger.Info("ready")
	}()

	s.Logger.Info("starting "+s.Name, "version", s.Version)
	err = web.Serve(serveCtx, s.Logger, s.Drain,
		web.Server{Name: "api", Listener: apiListener, Handler: web.LimitInFlight(web.Budget(api, s.RequestBudget), s.MaxInFlight, observe), Observe: &observe},
		web.Server{Name: "ops", Listener: opsListener, Handler: s.opsHandler(checks)},
	)
	if cause := context.Cause(serveCtx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return err
}

func (s Service) opsHandler(checks map[string]web.Check) http.Handler {
	ops := web.OpsHandler(s.Logger, s.Registry, checks)
	if s.Profiling {
		ops = web.WithProfiling(ops)
	}
	if len(s.Ops) == 0 {
		return ops
	}
	mux := http.NewServeMux()
	for pattern, h := range s.Ops {
		mux.Handle(pattern, h)
	}
	mux.Handle("/", ops)
	return mux
}

func (s Service) initialise(ctx context.Context) (http.Handler, error) {
	backoff := 500 * time.Millisecond
	for {
		h, err := s.Init(ctx)
		if err == nil {
			return h, nil
		}
		if !errors.Is(err, problem.ErrUnavailable) && !errors.Is(err, problem.ErrOverloaded) {
			return nil, fmt.Errorf("initialise %s: %w", s.Name, err)
		}
		s.Logger.Warn("database unreachable during initialisation; retrying", "error", err.Error(), "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// EnsureIndexes runs ensure (a store's index creation at start) bounded
// by max(timeout, MinIndexBudget), so that a database that stops
// answering while a service starts fails that Init attempt, which is
// then retried, instead of holding it until the database answers again.
// Not the bare *_MONGODB_TIMEOUT: building a new index on a large
// collection may rightly take longer than one request's budget.
func EnsureIndexes(ctx context.Context, timeout time.Duration, ensure func(context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, max(timeout, MinIndexBudget))
	defer cancel()
	return ensure(ctx)
}

// MinIndexBudget is the least time EnsureIndexes gives one start's index
// creation.
const MinIndexBudget = time.Minute

// NewRegistry returns a metrics registry with the Go runtime and process
// collectors; the API's request metrics are added by pkg/web.
func NewRegistry() *prometheus.Registry {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return registry
}

// Mongo is a service's connection to MongoDB: the client its stores use,
// whose commands are counted (mongodb_commands_total) and traced
// (mongoconn.CommandSpans, when tracing is configured), and the readiness
// check ("mongodb" in /readyz), a ping on a client of its own so that a
// busy request pool never makes the database look unreachable.
type Mongo struct {
	Client *mongo.Client
	Ready  web.Check
	ready  *mongo.Client
}

// DialMongo connects both clients of a Mongo to uri (mongoconn.Connect,
// mongoconn.ConnectReadiness); the readiness check fails once the
// database has not answered for selectTimeout, the requests' own budget.
func DialMongo(uri string, selectTimeout time.Duration, metrics prometheus.Registerer) (*Mongo, error) {
	client, err := mongoconn.Connect(uri, selectTimeout,
		mongoconn.Monitors(mongoconn.NewCommandCounter(metrics).Monitor(), mongoconn.CommandSpans()))
	if err != nil {
		return nil, err
	}
	ready, err := mongoconn.ConnectReadiness(uri, selectTimeout)
	if err != nil {
		_ = client.Disconnect(context.Background())
		return nil, err
	}
	return &Mongo{Client: client, Ready: mongoconn.NewReadiness(ready, selectTimeout).Check, ready: ready}, nil
}

// Close disconnects both clients, waiting at most 5 s for connections in
// use.
func (m *Mongo) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = m.Client.Disconnect(ctx)
	_ = m.ready.Disconnect(ctx)
}

// HealthCheck asks this process's own /readyz on the operations listener
// at opsAddr and returns nil on a 200. It lets a container health check run
// the service binary itself (distroless images have no shell or curl).
func HealthCheck(ctx context.Context, opsAddr string) error {
	host, port, err := net.SplitHostPort(opsAddr)
	if err != nil {
		return fmt.Errorf("operations address %q: %w", opsAddr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort(host, port)+"/readyz", nil)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("health check: /readyz answered %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	return nil
}

// MaxInFlight is the bound of the API requests one replica works on at
// once: configured when positive, else the size of the MongoDB connection
// pool of uri (mongoconn.PoolSize). At that bound every request that needs
// the database finds a connection without waiting in line for one, so a
// burst is shed at once with the overloaded 503 instead of slowing every
// request down until they time out on the pool.
func MaxInFlight(configured int, uri string) int {
	if configured > 0 {
		return configured
	}
	return mongoconn.PoolSize(uri)
}
