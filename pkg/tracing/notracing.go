//go:build notracing

package tracing

// compiled is false under the notracing tag: every helper returns at once
// whatever the environment says. Only the benchmark builds it, as the
// baseline that tracing configured off is measured against.
const compiled = false
