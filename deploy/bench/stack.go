package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/deploy/internal/svcproc"
	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/pkg/testkit/mongoproc"
)

// stack is the store and the two services the HTTP measures run against.
type stack struct {
	o                     benchOptions
	bin                   string
	uri                   string
	store                 string // describes the store, for the report
	accountDB, convDB     string
	convBase              string // convDB of the first start; measures add a suffix
	client                *mongo.Client
	driverCmds            *commandCounter // the commands client has sent
	account, conv         *svcproc.Process
	accountURL, convURL   string
	accountEnv, convEnv   []string
	accountOps, convOps   string
	firstAccountStart     time.Duration // includes key generation and indexes
	firstConversationsRun time.Duration
	seeded                int // the listing's conversations created so far
	cleanup               []func()
}

const (
	benchAccount = "bench"
	// Each login worker signs in as its own user, as separate users do:
	// the per-user login throttle is not what this measures.
	benchUserPrefix = "bench-"
)

func benchUser(i int) (username, password string) {
	return fmt.Sprintf("%s%d", benchUserPrefix, i), fmt.Sprintf("correct horse battery staple %d", i)
}

// newStack starts the store (MONGODB_URI when given, else the embedded
// one), provisions the bench users and starts both services.
func newStack(ctx context.Context, o benchOptions, bin string) (s *stack, err error) {
	// A failed start stops what started: through started, since a
	// "return nil, err" has set s to nil by the time this runs.
	started := &stack{o: o, bin: bin}
	s = started
	defer func() {
		if err != nil {
			started.close()
		}
	}()
	suffix := fmt.Sprintf("%d", time.Now().UnixNano())
	s.accountDB, s.convDB = "bench_account_"+suffix, "bench_conversations_"+suffix
	s.convBase = s.convDB
	if o.mongoURI != "" {
		s.uri, s.store = o.mongoURI, "MongoDB at MONGODB_URI (databases bench_*, dropped afterwards)"
	} else {
		dir, err := os.MkdirTemp("", "bench-store")
		if err != nil {
			return nil, err
		}
		s.cleanup = append(s.cleanup, func() { _ = os.RemoveAll(dir) })
		addr, err := svcproc.FreeAddr()
		if err != nil {
			return nil, err
		}
		db, err := mongoproc.Start(ctx, mongoproc.Options{Dir: dir, Addr: addr})
		if err != nil {
			return nil, fmt.Errorf("start embedded store: %w", err)
		}
		s.cleanup = append(s.cleanup, func() {
			stopCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_ = db.Stop(stopCtx)
		})
		s.uri = db.URI()
		s.store = "embedded FerretDB 1.24 on SQLite (the store of make run) in a process of its own, behind its command-serialising proxy"
	}
	s.driverCmds = &commandCounter{}
	// The harness's own client waits as long as the services do: its
	// heartbeats time out after this too, and a store busy with three
	// replicas and other builds beside them once took longer than 5 s.
	s.client, err = mongoconn.Connect(s.uri, 30*time.Second, s.driverCmds.monitor())
	if err != nil {
		return nil, err
	}
	// The closure keeps its own copies: a failed start runs it after
	// "return nil, err" has set s to nil.
	client, accountDB, convDB := s.client, s.accountDB, s.convDB
	s.cleanup = append(s.cleanup, func() {
		dropCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Database(accountDB).Drop(dropCtx)
		_ = client.Database(convDB).Drop(dropCtx)
		_ = client.Disconnect(dropCtx)
	})

	addrs := make([]string, 4)
	for i := range addrs {
		if addrs[i], err = svcproc.FreeAddr(); err != nil {
			return nil, err
		}
	}
	s.accountURL, s.accountOps = "http://"+addrs[0], addrs[1]
	s.convURL, s.convOps = "http://"+addrs[2], addrs[3]
	pprof := fmt.Sprint(o.profileDir != "")
	// Production settings throughout (argon2id parameters, RS256 keys,
	// throttle): only addresses, databases, logging and the requests'
	// database budget differ. The budget is dbBudget, not the 3 s
	// default: on the embedded store, which runs one command at a time,
	// a request queues behind the replicas' and the harness's commands,
	// and a 503 would end a measure that a deployment's database would
	// have served.
	s.accountEnv = []string{
		"ACCOUNT_MONGODB_URI=" + s.uri, "ACCOUNT_MONGODB_DATABASE=" + s.accountDB,
		"ACCOUNT_HTTP_ADDR=" + addrs[0], "ACCOUNT_OPS_ADDR=" + addrs[1],
		"ACCOUNT_ISSUER=" + s.accountURL, "ACCOUNT_LOG_LEVEL=warn", "ACCOUNT_OPS_PPROF=" + pprof,
		"ACCOUNT_SIGNING_ALG=" + o.signingAlg, "ACCOUNT_MONGODB_TIMEOUT=" + dbBudget,
	}
	s.convEnv = []string{
		"CONVERSATIONS_MONGODB_URI=" + s.uri, "CONVERSATIONS_MONGODB_DATABASE=" + s.convDB,
		"CONVERSATIONS_HTTP_ADDR=" + addrs[2], "CONVERSATIONS_OPS_ADDR=" + addrs[3],
		"CONVERSATIONS_JWKS_URL=" + s.accountURL + "/.well-known/jwks.json",
		"CONVERSATIONS_ISSUER=" + s.accountURL, "CONVERSATIONS_LOG_LEVEL=warn", "CONVERSATIONS_OPS_PPROF=" + pprof,
		"CONVERSATIONS_MONGODB_TIMEOUT=" + dbBudget,
		// The events measure opens its idle streams as one service client.
		fmt.Sprintf("CONVERSATIONS_EVENTS_MAX_STREAMS_PER_CALLER=%d", o.idleStreams+10),
	}
	s.convEnv = append(s.convEnv, webhookEnv()...)
	if err := s.provision(ctx); err != nil {
		return nil, err
	}
	if s.account, err = s.startAccount(ctx); err != nil {
		return nil, err
	}
	s.firstAccountStart = s.account.Ready
	if s.conv, err = s.startConversations(ctx); err != nil {
		return nil, err
	}
	s.firstConversationsRun = s.conv.Ready
	return s, nil
}

// dbBudget is the services' *_MONGODB_TIMEOUT in the bench (see
// newStack), as in deploy/clientstest.
const dbBudget = "30s"

// readyTimeout bounds a service's start, stopTimeout its graceful stop.
const (
	readyTimeout = svcproc.ReadyWait
	stopTimeout  = 20 * time.Second
)

func (s *stack) startAccount(ctx context.Context) (*svcproc.Process, error) {
	return svcproc.Start(ctx, filepath.Join(s.bin, "account"), s.accountEnv, s.accountOps, readyTimeout)
}

// startConversations starts the conversations service, with extra added
// to its environment.
func (s *stack) startConversations(ctx context.Context, extra ...string) (*svcproc.Process, error) {
	return svcproc.Start(ctx, filepath.Join(s.bin, "conversations"), append(slices.Clip(s.convEnv), extra...), s.convOps, readyTimeout)
}

// provision creates the bench account and one user per login worker with
// the account service's own provision command.
func (s *stack) provision(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "bench-provision")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	type user struct {
		Username     string `json:"username"`
		PasswordFile string `json:"passwordFile"`
	}
	var users []user
	for i := range s.o.workers {
		name, password := benchUser(i)
		file := filepath.Join(dir, name+".txt")
		if err := os.WriteFile(file, []byte(password), 0o600); err != nil {
			return err
		}
		users = append(users, user{name, file})
	}
	spec, err := json.Marshal(map[string]any{"accounts": []any{map[string]any{"name": benchAccount, "users": users}}})
	if err != nil {
		return err
	}
	specFile := filepath.Join(dir, "provision.json")
	if err := os.WriteFile(specFile, spec, 0o600); err != nil {
		return err
	}
	_, err = runTool(ctx, filepath.Join(s.bin, "account"), s.accountEnv, "", "provision", "--file", specFile)
	return err
}

// freshConversations restarts the conversations service on a database
// of its own for the measure name. On the embedded store every query but
// one by _id reads the whole collection, so a measure on the collections
// that the measures before it filled would measure their leftovers (the
// events measure, after the messages measure's thousands of events, ran
// past the whole run's timeout); on MongoDB the indexes make it no
// matter, and each measure still starts from the same state.
func (s *stack) freshConversations(ctx context.Context, name string) error {
	if s.conv != nil {
		if err := s.conv.Stop(stopTimeout); err != nil {
			return fmt.Errorf("stop conversations: %w", err)
		}
		s.conv = nil
	}
	db := s.convBase + "_" + name
	s.dropAtClose(db)
	s.convEnv = slices.DeleteFunc(s.convEnv, func(kv string) bool { return strings.HasPrefix(kv, "CONVERSATIONS_MONGODB_DATABASE=") })
	s.convEnv = append(s.convEnv, "CONVERSATIONS_MONGODB_DATABASE="+db)
	s.convDB = db
	var err error
	s.conv, err = s.startConversations(ctx)
	return err
}

// dropAtClose drops the database db when the stack closes.
func (s *stack) dropAtClose(db string) {
	client := s.client
	s.cleanup = append(s.cleanup, func() {
		dropCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = client.Database(db).Drop(dropCtx)
	})
}

func (s *stack) close() {
	for _, p := range []*svcproc.Process{s.conv, s.account} {
		if p != nil {
			_ = p.Stop(stopTimeout)
		}
	}
	for i := len(s.cleanup) - 1; i >= 0; i-- {
		s.cleanup[i]()
	}
}
