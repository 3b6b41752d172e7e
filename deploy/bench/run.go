package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/acme/platform/deploy/internal/svcproc"
)

// benchOptions are the flags, and what run finds in the environment.
type benchOptions struct {
	only          []string
	rounds        int
	workers       int
	cpuRun        time.Duration // one side, one round, in-process measures
	serviceRun    time.Duration // one side, one round, HTTP measures
	binDir        string
	out           string
	profileDir    string
	mongoURI      string
	signingAlg    string
	timeout       time.Duration
	conversations int           // the caller's conversations in the listing measure
	depth         int           // the deep page of the listing measure
	messages      int           // the messages of the listed conversation in the messages measure
	idleStreams   int           // idle event streams open in the events measure
	changes       int           // changes timed to the feed and the stream in the events measure
	streamBacklog int           // bytes of event data behind the unread streams of the stream-memory measure
	unreadStreams int           // streams that never read in the stream-memory measure
	settle        time.Duration // the webhook-replicas measure's wait after starting replicas
	idleWindow    time.Duration // how long the webhook-replicas measure counts the replicas' commands with nothing to do
	tracingPosts  int           // posts per worker in each run of the tracing measure's post sides
	wrk           string        // the wrk binary, found at start when a measure sends with it
}

// measures are the -only names, in the order of the table.
var measures = []string{"verify-rs256", "verify-es256", "verify-eddsa", "login", "client-credentials", "authorization-code", "users", "messages", "events", "relay", "stream-memory", "webhooks", "webhook-replicas", "listing", "tracing", "startup"}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	var o benchOptions
	var only string
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&only, "only", "", "comma-separated measures to run, of: "+strings.Join(measures, ", ")+" (default all)")
	fs.IntVar(&o.rounds, "rounds", 5, "rounds per ratio; each runs both sides once (at least 5 for a reported figure)")
	fs.IntVar(&o.workers, "workers", 2*runtime.GOMAXPROCS(0), "concurrent workers on each side of every ratio")
	fs.DurationVar(&o.cpuRun, "cpu-run", 500*time.Millisecond, "length of one side of one round of the token measures")
	fs.DurationVar(&o.serviceRun, "service-run", 3*time.Second, "length of one side of one round of the HTTP measures")
	fs.StringVar(&o.binDir, "bin", "", "folder with prebuilt account and conversations binaries (default: build them)")
	fs.StringVar(&o.out, "out", "", "also write the table, with the machine, into this Markdown file between its markers (with -only: replace only those measures' rows of the table there)")
	fs.StringVar(&o.profileDir, "profile", "", "write CPU profiles here: of the bench process for the token measures, of the service (over OPS_PPROF) for login, client-credentials, listing and tracing")
	fs.StringVar(&o.signingAlg, "signing-alg", "RS256", "ACCOUNT_SIGNING_ALG of the measured account service")
	fs.DurationVar(&o.timeout, "timeout", 45*time.Minute, "stop the whole run after this long (a full run takes about 20 minutes)")
	fs.IntVar(&o.conversations, "conversations", 1000, "conversations of the caller in the listing measure")
	fs.IntVar(&o.depth, "depth", 50, "the deep page compared with the first in the listing measure")
	fs.IntVar(&o.messages, "messages", 1000, "messages of the listed conversation in the messages measure")
	fs.IntVar(&o.idleStreams, "idle-streams", 1000, "idle event streams open on the replica in the events measure")
	fs.IntVar(&o.changes, "changes", 200, "changes timed from the POST to the feed and to a stream in the events measure, and four times the messages each writer of the relay measure posts")
	fs.IntVar(&o.streamBacklog, "stream-backlog", 13<<20, "bytes of event data in the log behind the unread streams of the stream-memory measure")
	fs.IntVar(&o.unreadStreams, "unread-streams", 30, "streams from after=0 that never read their body in the stream-memory measure")
	fs.DurationVar(&o.settle, "settle", 20*time.Second, "how long the webhook-replicas measure leaves the replicas it started before it counts (their pollers back off from their first interval)")
	fs.DurationVar(&o.idleWindow, "idle-window", 5*time.Second, "how long the webhook-replicas measure counts the replicas' commands with nothing to do, after -settle and before its load")
	// 75: about a second of posts per worker on the 2-core machine, whose
	// events the relay then orders in about five (on the embedded store it
	// orders them several times slower than the posts come, and a run's
	// events are ordered before the next run).
	fs.IntVar(&o.tracingPosts, "tracing-posts", 75, "posts per worker in each run of each side of the tracing measure's post row")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.mongoURI = getenv("MONGODB_URI")
	if only != "" {
		o.only = strings.Split(only, ",")
		for _, m := range o.only {
			if !slices.Contains(measures, m) {
				return fmt.Errorf("-only: unknown measure %q; known: %s", m, strings.Join(measures, ", "))
			}
		}
	}
	if o.rounds < 1 || o.workers < 1 || o.cpuRun <= 0 || o.serviceRun <= 0 || o.idleWindow <= 0 || o.settle < 0 {
		return errors.New("-rounds and -workers must be positive, the run lengths and -idle-window above zero, and -settle not negative")
	}
	if o.depth < 2 || o.conversations < 10*o.depth+1 {
		return errors.New("-depth must be at least 2, with more than 10 × depth -conversations")
	}
	if o.idleStreams < 10 || o.changes < 1 || o.tracingPosts < 1 {
		return errors.New("-idle-streams must be at least 10, and -changes and -tracing-posts at least 1")
	}
	if o.streamBacklog < 1 || o.unreadStreams < 1 {
		return errors.New("-stream-backlog and -unread-streams must be positive")
	}
	if o.messages < 11 {
		return errors.New("-messages must be at least 11: a page of 10 and one more")
	}
	if o.out != "" && o.only != nil && !strings.Contains(readFile(o.out), beginMarker) {
		return fmt.Errorf("-out %s with -only replaces rows of a full run's table, and the file has none: run without -only first", o.out)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	want := func(m string) bool { return o.only == nil || slices.Contains(o.only, m) }
	if want("client-credentials") {
		// Before minutes of other measures, not after them.
		var err error
		if o.wrk, err = lookWrk(); err != nil {
			return err
		}
	}

	var rows []row
	// A measure that fails is a row saying so; the others still run, and
	// the run fails at the end.
	var failed []string
	measured := func(name string, got []row, err error) {
		if err != nil {
			fmt.Fprintf(stderr, "measure %s failed: %v\n", name, err)
			failed = append(failed, name)
			rows = append(rows, row{measure: name, failures: strings.NewReplacer("|", "\\|", "\n", " ").Replace(err.Error()), id: name})
			return
		}
		rows = append(rows, got...)
	}
	for _, alg := range []string{"RS256", "ES256", "EdDSA"} {
		name := "verify-" + strings.ToLower(alg)
		if !want(name) {
			continue
		}
		fmt.Fprintf(stderr, "measuring token verification, %s…\n", alg)
		got, err := verifyRows(ctx, o, alg)
		if err == nil {
			err = profileInProcess(ctx, o, alg)
		}
		measured(name, got, err)
	}

	store := "none (token measures only)"
	if want("login") || want("client-credentials") || want("authorization-code") || want("users") || want("listing") || want("messages") || want("events") || want("relay") || want("stream-memory") || want("webhooks") || want("webhook-replicas") || want("tracing") || want("startup") {
		bin := o.binDir
		if bin == "" {
			dir, err := os.MkdirTemp("", "bench-bin")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			fmt.Fprintln(stderr, "building the service binaries…")
			if bin, err = svcproc.Binaries(ctx, dir, "account", "conversations"); err != nil {
				return err
			}
		}
		fmt.Fprintln(stderr, "starting the store and both services…")
		s, err := newStack(ctx, o, bin)
		if err != nil {
			return err
		}
		defer s.close()
		store = s.store
		for _, m := range []struct {
			name string
			rows func(context.Context, *stack) ([]row, error)
			// ownDatabase: the measure runs on a conversations database
			// of its own (see stack.freshConversations).
			ownDatabase bool
		}{
			{"login", loginRows, false},
			{"client-credentials", clientCredentialsRows, false},
			{"authorization-code", authorizationCodeRows, false},
			{"users", usersRows, false},
			{"messages", messagesRows, true},
			{"events", eventsRows, true},
			{"relay", relayRows, true},
			{"stream-memory", streamMemoryRows, true},
			{"webhooks", webhooksRows, true},
			{"webhook-replicas", webhookReplicaRows, false},
			{"listing", listingRows, true},
			{"tracing", tracingRows, true},
			{"startup", startupRows, false},
		} {
			if !want(m.name) {
				continue
			}
			fmt.Fprintf(stderr, "measuring %s…\n", m.name)
			began := time.Now()
			var err error
			if m.ownDatabase || s.conv == nil {
				// A measure before may have failed with the service
				// stopped.
				err = s.freshConversations(ctx, m.name)
			}
			var got []row
			if err == nil {
				got, err = m.rows(ctx, s)
			}
			measured(m.name, got, err)
			fmt.Fprintf(stderr, "%s took %s\n", m.name, time.Since(began).Round(time.Second))
		}
	}

	cmdline := "go run ./deploy/bench " + strings.Join(args, " ")
	m := describeMachine(store, gitCommit(), strings.TrimSpace(cmdline))
	m.method = fmt.Sprintf("%d rounds alternating the sides, %s (token measures) or %s (HTTP measures) per side per round, %d workers on each side",
		o.rounds, o.cpuRun, o.serviceRun, o.workers)
	m.costs = costModel(o.workers)
	fmt.Fprintln(stdout)
	m.write(stdout)
	fmt.Fprintln(stdout)
	writeTable(stdout, rows)
	if o.out != "" {
		write := writeDoc
		if o.only != nil {
			write = func(path string, m machine, rows []row) error { return updateDoc(path, m, rows, o.only) }
		}
		if err := write(o.out, m, rows); err != nil {
			return err
		}
		fmt.Fprintln(stderr, "wrote", o.out)
	}
	var missed []string
	for _, r := range rows {
		if r.hasGoal && !r.met {
			missed = append(missed, r.measure)
		}
	}
	if len(missed) > 0 {
		fmt.Fprintf(stderr, "\ntargets missed (see docs/benchmarks.md for why): %s\n", strings.Join(missed, "; "))
	}
	if len(failed) > 0 {
		return fmt.Errorf("measures failed: %s (their rows say why)", strings.Join(failed, ", "))
	}
	return nil
}

// profileInProcess profiles the library side of a token measure alone.
func profileInProcess(ctx context.Context, o benchOptions, alg string) error {
	if o.profileDir == "" {
		return nil
	}
	// A fresh fixture keeps the profile free of the other sides.
	f, err := os.Create(filepath.Join(o.profileDir, "verify-"+strings.ToLower(alg)+".pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	fx, err := newVerifyFixture(ctx, alg)
	if err != nil {
		return err
	}
	defer fx.close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	_, err = runFor(ctx, side{name: "library", workers: o.workers, op: fx.library}, 5*time.Second)
	pprof.StopCPUProfile()
	return err
}

// profile runs one side for 10 s while the service records a CPU profile.
func (s *stack) profile(ctx context.Context, p *svcproc.Process, sd side, name string) error {
	if s.o.profileDir == "" {
		return nil
	}
	const d = 10 * time.Second
	errc := make(chan error, 1)
	go func() { errc <- cpuProfile(ctx, p, d, filepath.Join(s.o.profileDir, name+".pprof")) }()
	time.Sleep(100 * time.Millisecond) // let the profile start first
	if _, err := runFor(ctx, sd, d); err != nil {
		return err
	}
	return <-errc
}

func gitCommit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}
