// Package observabilitytest holds the tests of deploy/observability: the
// Prometheus rule files load with Prometheus' own rule parser, every
// PromQL expression of the rules and of the Grafana dashboard parses, and
// every metric they name is exported by the running service binaries
// whose job they select.
//
// It has no non-test code; run it with `go test ./observabilitytest/` from
// deploy/. It builds and starts both services on the test database.
package observabilitytest
