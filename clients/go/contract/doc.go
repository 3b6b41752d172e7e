// Package contract holds the Go client's tests against stand-ins of the
// account and conversations services whose every exchange is checked
// against both OpenAPI documents.
//
// It is a module of its own so that the client's module
// (github.com/acme/platform/clients/go) requires nothing a caller does not
// use: the OpenAPI validator these tests need stays out of every backend
// that imports the client.
package contract
