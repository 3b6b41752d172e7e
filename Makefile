# One entry point for everything a developer or CI does. Building and running
# need only Go; make test also needs the client toolchains and wrk (README.md,
# "Test prerequisites"), and make lint mypy and black ("Lint prerequisites"),
# which they install first on Debian and Ubuntu (deploy/prereqs.sh).
SHELL := /bin/bash
GO ?= go
# Every module of the workspace (go.work).
MODULES := pkg pkg/testkit clients/go services/account services/conversations deploy
PACKAGES := $(foreach m,$(MODULES),./$(m)/...)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X main.version=$(VERSION)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
BENCHTIME ?= 1s
FUZZTIME ?= 60s

.PHONY: run test test-prereqs test-race test-clients lint lint-prereqs lint-python tidy-check fmt-check vet build images bench bench-go fuzz clean help

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

# Extra flags of the local stack, e.g. other ports:
# make run DEVSTACK_ARGS='--account-addr 127.0.0.1:18080' (./bin/devstack --help lists them).
DEVSTACK_ARGS ?=
# make run TRACES=1 prints every trace of both services in the terminal.
TRACES ?=

run: build ## run the local stack: embedded store, both services, demo data (DEVSTACK_ARGS for other ports, TRACES=1 to print traces)
	$(GO) build -o bin/devstack ./deploy/devstack
	./bin/devstack --bin bin --data .data $(if $(TRACES),--traces) $(DEVSTACK_ARGS)

build: ## build the production binaries into bin/
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/account ./services/account/cmd/account
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/conversations ./services/conversations/cmd/conversations

images: ## build both container images (needs a Docker engine)
	docker build -f services/account/Dockerfile --build-arg VERSION=$(VERSION) -t acme/account:$(VERSION) -t acme/account:dev .
	docker build -f services/conversations/Dockerfile --build-arg VERSION=$(VERSION) -t acme/conversations:$(VERSION) -t acme/conversations:dev .

# Every go command run through make uses -trimpath, the test builds and the
# embedded store that mongoproc builds among them (it inherits GOFLAGS): the
# build cache then does not depend on the checkout's folder, so a fresh
# clone elsewhere reuses the cache a previous clone filled.
export GOFLAGS += -trimpath

# make test tests every package with one set of build flags, without
# -race: the race detector compiles the standard library and every
# dependency a second time (its instrumented build), about a tenth of a
# cold run, and runs the tests it watches several times slower; make
# test-race runs every package that runs our code in its own process with
# it (see docs/decisions.md). The packages start in the order given, the
# longest first (deploy/gotest.sh): started last, one of them would run
# alone at the end while the other core idles. First the three suites of
# processes (client suites, end-to-end, the bench harness), then the HTTP
# suites, then the longest of the rest as a warm run measured them.
HTTP_SUITES := $(addprefix github.com/acme/platform/services/,account/http conversations/http)
BINARY_TESTS := $(addprefix github.com/acme/platform/deploy/,clientstest e2e bench oidcinterop observabilitytest devstack)
STATIC_CHECKS := $(addprefix github.com/acme/platform/deploy/,composetest imagetest k8stest docstest prereqstest)
EMBEDDED_STORE := $(addprefix github.com/acme/platform/,pkg/testkit/embeddedmongo pkg/testkit/cmd/embeddedmongo)
LONGEST := $(wordlist 1,3,$(BINARY_TESTS)) $(HTTP_SUITES) $(addprefix github.com/acme/platform/,pkg/testkit/mongoproc services/account/mongostore pkg/token pkg/testkit/internal/wireproxy services/account/password services/account/cmd/account services/account/signing)
# Listed once per make run, when vet or test first needs it (go list of
# every module takes about a CPU-second), and not by targets that do not.
TEST_PACKAGES = $(eval TEST_PACKAGES := $(LONGEST) $(filter-out $(LONGEST),$(shell $(GO) list $(PACKAGES))))$(TEST_PACKAGES)
# What make test-race runs: every package whose tests run our code in their
# own process (the tests that run the service binaries as processes, the
# static checks of the deploy files and the embedded store's packages gain
# nothing from it).
RACE_PACKAGES = $(filter-out $(BINARY_TESTS) $(STATIC_CHECKS) $(EMBEDDED_STORE),$(TEST_PACKAGES))
CLIENT_TESTS := github.com/acme/platform/deploy/clientstest
# Test binaries run at once; most of their time is spent waiting on the
# embedded store or on a service process, so more than the two cores.
TEST_PARALLEL ?= 6
# Parallel tests at once within one test binary (a test binary runs
# GOMAXPROCS at a time by default): the end-to-end tests mostly wait on the
# processes they start (key rotations, outages, drains).
TESTS_PER_BINARY ?= 4
# The service binaries are built once for every test that runs them
# (SERVICE_BINARIES, see deploy/internal/svcproc). So is the embedded store
# (EMBEDDEDMONGO_BIN, see pkg/testkit/mongoproc): each test binary that
# needs a database would otherwise run go list and go build to find it up
# to date, about a CPU-second each.
# The tests get a $TMPDIR of their own, so the embedded store processes
# they start (pkg/testkit/mongoproc) are theirs alone; none may still run
# EMBEDDED_EXIT_WAIT seconds after the tests.
EMBEDDED_EXIT_WAIT := 10
# The test binaries, the service binaries and the embedded store that make
# test builds go without DWARF (stack traces keep their file and line; a
# debugger wants a build of its own, dlv test), and deploy/gotest.sh builds
# and runs them instead of go build and go test -count=1: it keeps the
# linked binaries in a cache folder between runs, so that a warm make test
# links only what changed (linking its 38 test binaries anew each time
# took more CPU than most of the tests).
TEST_LDFLAGS := -ldflags=-w
# A test binary built with -race sleeps a second before it exits (the race
# runtime's atexit_sleep_ms, for reports of goroutines still running);
# make test-race runs some thirty of them. An explicit GORACE wins.
GORACE ?= atexit_sleep_ms=0
export GORACE
GOTEST := GO=$(GO) deploy/gotest.sh
TEST_TIMEOUT := 15m

# make test, make test-clients and make lint first install what is missing
# of their README section's apt-get line on Debian and Ubuntu, and elsewhere
# stop naming it (deploy/prereqs.sh; nothing but one dpkg-query when all is
# there). SKIP_CLIENTS means the developer chose the toolchains: make test
# installs nothing then, and each suite not left out still fails naming its
# missing package.
test-prereqs:
	@[ -n "$(SKIP_CLIENTS)" ] || deploy/prereqs.sh 'Test prerequisites'

lint-prereqs:
	@deploy/prereqs.sh 'Lint prerequisites'

test: test-prereqs fmt-check tidy-check vet ## installs what is missing of the README's test prerequisites (Debian, Ubuntu), then gofmt check, go mod tidy check, go vet, and every module's tests, the client libraries' suites among them; fails if an embedded store process outlives them
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && export TMPDIR=$$tmp || exit; \
	( set -x && $(GOTEST) build $$tmp/bin $(TEST_LDFLAGS) ./pkg/testkit/cmd/embeddedmongo ./services/account/cmd/account ./services/conversations/cmd/conversations ) || exit; \
	export EMBEDDEDMONGO_BIN=$$tmp/bin/embeddedmongo SERVICE_BINARIES=$$tmp/bin; \
	( set -x && $(GOTEST) test -p $(TEST_PARALLEL) -run-flag -test.timeout=$(TEST_TIMEOUT) -run-flag -test.parallel=$(TESTS_PER_BINARY) -- $(TEST_LDFLAGS) -vet=off -- $(TEST_PACKAGES) ) || exit 1; \
	for i in $$(seq $$(( $(EMBEDDED_EXIT_WAIT) * 5 ))); do pgrep -f "/embeddedmongo -dir $$tmp/" >/dev/null || exit 0; sleep 0.2; done; \
	echo "embedded store processes still running $(EMBEDDED_EXIT_WAIT)s after the tests:"; pgrep -af "/embeddedmongo -dir $$tmp/"; exit 1

test-race: ## every package whose tests run our code in their own process, with the race detector (make test runs without it)
	$(GO) test -race -count=1 -timeout $(TEST_TIMEOUT) $(RACE_PACKAGES)

# Each client library's own suite (node --test, unittest, PHPUnit) against
# the real binaries on a fresh database (deploy/clientstest); a missing
# toolchain fails with its package; SKIP_CLIENTS=php,python leaves clients out.
# make test runs them too.
test-clients: test-prereqs ## run only the Go, JS, Python and PHP clients' own test suites against the real services (SKIP_CLIENTS=php,python leaves some out)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && export TMPDIR=$$tmp && set -x && \
	$(GO) build -o $$tmp/bin/ ./services/account/cmd/account ./services/conversations/cmd/conversations && \
	SERVICE_BINARIES=$$tmp/bin $(GO) test -count=1 -timeout 15m $(CLIENT_TESTS)

tidy-check: ## fail when a module's go.mod or go.sum is not what go mod tidy makes
	@set -e; for m in $(MODULES); do (cd $$m && $(GO) mod tidy -diff) || { echo "go mod tidy needed in $$m"; exit 1; }; done

fmt-check: ## fail when a file is not gofmt-formatted
	@out=$$(gofmt -l $(MODULES)); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# make test's go vet: every check of cmd/vet over every package of the
# repository, through deploy/vettool.sh, which computes no facts for the
# packages of the standard library and of other modules (what a package
# learns about the functions it calls, such as which are printf wrappers).
# go vet computes them for every dependency, some 1,100 packages parsed and
# type-checked from source, about 170 of the 200 CPU-seconds that vet took
# in a cold run; cmd/vet knows the printf functions of the standard library
# by name, and a dependency's own findings are never reported. make lint
# runs plain go vet.
vet: ## go vet every package of the repository (without facts of other modules' packages; make lint runs plain go vet)
	GOVET_TOOL=$$($(GO) env GOTOOLDIR)/vet GOVET_ROOT=$(CURDIR) $(GO) vet -vettool=$(CURDIR)/deploy/vettool.sh $(TEST_PACKAGES)

lint: lint-prereqs fmt-check lint-python ## installs mypy and black when missing (Debian, Ubuntu), then gofmt, go vet, staticcheck, and the Python client's mypy and black
	$(GO) vet $(PACKAGES)
	$(GO) run $(STATICCHECK) $(PACKAGES)

# The checkers clients/python/pyproject.toml configures, Debian's builds
# (mypy 1.0, black 23.1), installed first when missing (lint-prereqs).
lint-python: lint-prereqs ## mypy --strict and black --check over the Python client (configured in clients/python/pyproject.toml)
	cd clients/python && mypy && black --check --diff .

bench: ## measure the hot paths against their limits and peers; prints the table and rewrites docs/benchmarks.md (about 20 min)
	$(GO) run ./deploy/bench -out docs/benchmarks.md

bench-go: ## run the packages' Go micro-benchmarks (go test -bench)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PACKAGES)

# Fuzz targets as Name:package. A fuzzing run takes one target of one
# package, so "make fuzz" runs them one after another, each for FUZZTIME;
# "make test" runs their seed corpora as ordinary tests.
FUZZ_TARGETS := \
	FuzzVerify:./pkg/token \
	FuzzDecodeJSON:./pkg/web \
	FuzzLogin:./services/account/http \
	FuzzDefinitionInput:./services/account \
	FuzzListParams:./services/conversations/http \
	FuzzIfMatch:./services/conversations/http \
	FuzzNewMessage:./services/conversations \
	FuzzMergePatch:./services/conversations \
	FuzzDecode:./services/conversations/cursor

fuzz: ## run each fuzz target for FUZZTIME (default 60s), one after another
	@set -e; for t in $(FUZZ_TARGETS); do \
		name=$${t%%:*}; pkg=$${t#*:}; \
		echo "== $$name in $$pkg for $(FUZZTIME)"; \
		$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg/; \
	done

clean: ## remove build output (keeps .data)
	rm -rf bin
