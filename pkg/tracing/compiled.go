//go:build !notracing

package tracing

// compiled: tracing is built in (the notracing tag leaves it out, for
// the benchmark's baseline).
const compiled = true
