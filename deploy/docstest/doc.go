// Package docstest holds the tests that keep the documents true to the
// code: docs/errors.md lists exactly the error codes each service can
// answer with, the README's endpoint tables exactly the operations of the
// services' OpenAPI documents, and docs/architecture.md's code map every
// package folder, with request walks that count their files.
//
// It has no non-test code; run it with `go test ./docstest/` from deploy/.
package docstest
