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

# make test runs every package's tests with plain go test, without -race
# (make test-race runs the packages that run our code with it; see
# docs/decisions.md). Tests that start processes (the embedded store, the
# service binaries, the client toolchains) run with -count=1: their outcome
# depends on more than go test can see. Every other package keeps go test's
# cache, so a warm run re-runs only what changed.
ALL_PACKAGES = $(eval ALL_PACKAGES := $(shell $(GO) list $(PACKAGES)))$(ALL_PACKAGES)
# A package's tests start processes when its test binary links the embedded
# store's launcher or the service launcher, or its tests run os/exec.
PROCESS_FOUND = $(eval PROCESS_FOUND := $(sort $(shell $(GO) list -test -f '{{if and (not .ForTest) (eq .Name "main")}}{{.ImportPath}} {{join .Deps " "}}{{end}}' $(PACKAGES) | grep -E ' github.com/acme/platform/(pkg/testkit/mongoproc|deploy/internal/svcproc)( |$$)' | cut -d' ' -f1 | sed 's/\.test$$//') $(shell $(GO) list -f '{{.ImportPath}} {{join .TestImports " "}} {{join .XTestImports " "}}' $(PACKAGES) | grep -E ' os/exec( |$$)' | cut -d' ' -f1)))$(PROCESS_FOUND)
# The longest start first, longest first (as measured), so that none
# starts last and runs alone while the other core idles.
LONGEST := $(addprefix github.com/acme/platform/,deploy/e2e services/conversations/http deploy/bench deploy/clientstest services/account/http services/account/cmd/account deploy/oidcinterop services/account/mongostore services/conversations/mongostore deploy/devstack)
PROCESS_PACKAGES = $(filter $(PROCESS_FOUND),$(LONGEST)) $(filter-out $(LONGEST),$(PROCESS_FOUND))
CACHED_PACKAGES = $(filter-out $(PROCESS_PACKAGES),$(ALL_PACKAGES))
# What make test-race runs: every package whose tests run our code in their
# own process (the tests that run the service binaries as processes, the
# static checks of the deploy files and the embedded store's packages gain
# nothing from it).
BINARY_TESTS := $(addprefix github.com/acme/platform/deploy/,clientstest e2e bench oidcinterop observabilitytest devstack)
STATIC_CHECKS := $(addprefix github.com/acme/platform/deploy/,composetest imagetest k8stest docstest prereqstest)
EMBEDDED_STORE := $(addprefix github.com/acme/platform/,pkg/testkit/embeddedmongo pkg/testkit/cmd/embeddedmongo)
RACE_PACKAGES = $(filter-out $(BINARY_TESTS) $(STATIC_CHECKS) $(EMBEDDED_STORE),$(ALL_PACKAGES))
CLIENT_TESTS := github.com/acme/platform/deploy/clientstest
# Test binaries run at once; the process tests mostly wait on the embedded
# store or a service process, so more than the two cores.
TEST_PARALLEL ?= 6
# Parallel tests at once within one test binary: the end-to-end tests
# mostly wait on the processes they start.
TESTS_PER_BINARY ?= 4
# The service binaries and the embedded store are built once for every test
# that runs them (SERVICE_BINARIES, see deploy/internal/svcproc;
# EMBEDDEDMONGO_BIN, see pkg/testkit/mongoproc). The process tests get a
# $TMPDIR of their own, so the embedded store processes they start are
# theirs alone; none may still run EMBEDDED_EXIT_WAIT seconds after them.
EMBEDDED_EXIT_WAIT := 10
# Test and service binaries go without DWARF: linking is a large share of a
# run, and stack traces keep file and line (debug with dlv test).
TEST_LDFLAGS := -ldflags=-w
# A test binary built with -race sleeps a second before it exits; an
# explicit GORACE wins.
GORACE ?= atexit_sleep_ms=0
export GORACE
TEST_TIMEOUT := 15m
TEST_FLAGS = $(TEST_LDFLAGS) -vet=off -p $(TEST_PARALLEL) -timeout $(TEST_TIMEOUT) -parallel $(TESTS_PER_BINARY)

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
	$(GO) test $(TEST_FLAGS) $(CACHED_PACKAGES)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && export TMPDIR=$$tmp || exit; \
	( set -x && $(GO) build $(TEST_LDFLAGS) -o $$tmp/bin/ ./pkg/testkit/cmd/embeddedmongo ./services/account/cmd/account ./services/conversations/cmd/conversations ) || exit; \
	export EMBEDDEDMONGO_BIN=$$tmp/bin/embeddedmongo SERVICE_BINARIES=$$tmp/bin; \
	( set -x && $(GO) test $(TEST_FLAGS) -count=1 $(PROCESS_PACKAGES) ) || exit 1; \
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

vet: ## go vet every package of the repository
	$(GO) vet $(PACKAGES)

lint: lint-prereqs fmt-check vet lint-python ## installs mypy and black when missing (Debian, Ubuntu), then gofmt, go vet, staticcheck, and the Python client's mypy and black
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
