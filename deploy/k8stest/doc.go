// Package k8stest holds the tests of the Kubernetes manifests in
// deploy/k8s: each kustomization is built with kustomize's Go API (as
// `kubectl apply -k` would), every object is decoded strictly into its
// Kubernetes API type, and the result is checked against what the services
// need (probes, security context, configuration variables the binaries
// know, signing keys, the JWKS address).
//
// It has no non-test code; run it with `go test ./k8stest/` from deploy/.
package k8stest
