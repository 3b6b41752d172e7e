package main

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// side is one of the two things a ratio compares: an operation run by a
// fixed number of workers.
type side struct {
	name    string
	workers int
	// op is one operation; worker is the index of the goroutine running
	// it, for operations that need one identity per worker.
	op func(ctx context.Context, worker int) error
	// cpu, when set, reads the CPU time consumed so far by the process
	// that does the side's work (a service, or this process), so that a
	// sample also gives the CPU cost of one operation.
	cpu func() (time.Duration, error)
	// commands, when set, reads the database commands the side has sent
	// so far (a service's mongodb_commands_total, or the bench's own
	// client's for a driver side), so that a sample also gives the
	// commands of one operation.
	commands func() (float64, error)
	// run, when set instead of op and workers, is an outside load
	// generator: it sends operations for d and returns how many completed
	// and over how long.
	run func(ctx context.Context, d time.Duration) (int64, time.Duration, error)
}

// sample is one timed run of a side.
type sample struct {
	ops     int64
	elapsed time.Duration
	mallocs uint64        // heap allocations of this process during the run
	cpu     time.Duration // CPU time of the side's process during the run, when measured
	// commands sent to the database during the run, when counted
	// (counted tells): see side.commands.
	commands float64
	counted  bool
}

// commandsPerOp is the database commands of one operation.
func (s sample) commandsPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return s.commands / float64(s.ops)
}

// cpuPerOp is the CPU time one operation cost its process.
func (s sample) cpuPerOp() time.Duration {
	if s.ops == 0 {
		return 0
	}
	return s.cpu / time.Duration(s.ops)
}

func (s sample) perSecond() float64 { return float64(s.ops) / s.elapsed.Seconds() }

func (s sample) allocsPerOp() float64 {
	if s.ops == 0 {
		return 0
	}
	return float64(s.mallocs) / float64(s.ops)
}

// maxOpsPerRun bounds a run by count as well as by time.
const maxOpsPerRun = 50_000_000

// runFor runs s until d has passed (or maxOpsPerRun operations). The first
// failing operation ends the run with its error: a ratio over failures
// would measure the error path.
//
// A run that counted no operation, or where CPU is measured no tick of the
// process's CPU clock, says nothing: on a loaded machine d can pass before
// the workers or the load generator get a core. Such a run goes on, d at a
// time, until it has both (or ctx ends), so that every sample carries a
// figure however slow the machine; runs of the real lengths have them
// after the first d.
func runFor(ctx context.Context, s side, d time.Duration) (sample, error) {
	got, err := runOnce(ctx, s, d)
	for err == nil && (got.ops == 0 || (s.cpu != nil && got.cpu == 0)) {
		var more sample
		more, err = runOnce(ctx, s, d)
		got = got.add(more)
	}
	return got, err
}

// runOnce is one run of s for d.
func runOnce(ctx context.Context, s side, d time.Duration) (sample, error) {
	if s.run != nil {
		return measured(ctx, s, func(ctx context.Context) (int64, time.Duration, error) { return s.run(ctx, d) })
	}
	return measured(ctx, s, func(ctx context.Context) (int64, time.Duration, error) {
		return runWorkers(ctx, s, until(d))
	})
}

// until allows operations until d has passed from now, or maxOpsPerRun
// of them.
func until(d time.Duration) func() bool {
	deadline := time.Now().Add(d)
	var tickets atomic.Int64
	return func() bool { return time.Now().Before(deadline) && tickets.Add(1) <= maxOpsPerRun }
}

// runN runs s.op on s.workers goroutines until n operations have been
// done: a run of a fixed amount of work, for sides whose operations change
// what the next ones cost (a post grows the collections that the store
// scans), so that every side leaves its database as the others leave
// theirs.
func runN(ctx context.Context, s side, n int64) (sample, error) {
	var tickets atomic.Int64
	return measured(ctx, s, func(ctx context.Context) (int64, time.Duration, error) {
		return runWorkers(ctx, s, func() bool { return tickets.Add(1) <= n })
	})
}

// measured runs work once and returns its operations and time with what
// the side counts around it: the harness's allocations, s.cpu and
// s.commands.
func measured(ctx context.Context, s side, work func(context.Context) (int64, time.Duration, error)) (sample, error) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var cpuBefore time.Duration
	if s.cpu != nil {
		var err error
		if cpuBefore, err = s.cpu(); err != nil {
			return sample{}, err
		}
	}
	var cmdsBefore float64
	if s.commands != nil {
		var err error
		if cmdsBefore, err = s.commands(); err != nil {
			return sample{}, err
		}
	}
	var got sample
	var err error
	got.ops, got.elapsed, err = work(ctx)
	if err != nil {
		return sample{}, fmt.Errorf("%s: %w", s.name, err)
	}
	runtime.ReadMemStats(&after)
	got.mallocs = after.Mallocs - before.Mallocs
	if s.cpu != nil {
		cpuAfter, err := s.cpu()
		if err != nil {
			return sample{}, err
		}
		got.cpu = cpuAfter - cpuBefore
	}
	if s.commands != nil {
		cmdsAfter, err := s.commands()
		if err != nil {
			return sample{}, err
		}
		got.commands, got.counted = max(cmdsAfter-cmdsBefore, 0), true
	}
	return got, nil
}

// runWorkers runs s.op on s.workers goroutines, each operation once take
// allows it, and returns the operations done and the time they took.
func runWorkers(ctx context.Context, s side, take func() bool) (int64, time.Duration, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var ops atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for w := range s.workers {
		wg.Go(func() {
			for ctx.Err() == nil && take() {
				if err := s.op(ctx, w); err != nil {
					cancel(err)
					return
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return 0, 0, err
	}
	return ops.Load(), elapsed, nil
}

// alternate measures the sides in turns, rounds times, after one short
// warm-up run of each: every round runs each side once for d, and the
// side that goes first rotates so that neither always meets a warm or a
// cold machine. It returns the samples as samples[side][round].
func alternate(ctx context.Context, rounds int, d time.Duration, sides ...side) ([][]sample, error) {
	for _, s := range sides {
		if _, err := runFor(ctx, s, d/4); err != nil {
			return nil, fmt.Errorf("warm-up: %w", err)
		}
	}
	samples := make([][]sample, len(sides))
	for r := range rounds {
		for i := range sides {
			k := (r + i) % len(sides)
			got, err := runFor(ctx, sides[k], d)
			if err != nil {
				return nil, fmt.Errorf("round %d: %w", r+1, err)
			}
			samples[k] = append(samples[k], got)
		}
	}
	return samples, nil
}

// spread is the median and range of one statistic over the rounds.
type spread struct {
	median, min, max float64
	n                int
}

func spreadOf(values []float64) spread {
	v := slices.Clone(values)
	slices.Sort(v)
	n := len(v)
	if n == 0 {
		return spread{}
	}
	med := v[n/2]
	if n%2 == 0 {
		med = (v[n/2-1] + v[n/2]) / 2
	}
	return spread{median: med, min: v[0], max: v[n-1], n: n}
}

// ratios pairs the rounds of two sides: round i of a against round i of b,
// measured next to each other.
//
// A round whose ratio is not a number (a CPU time below the clock's 10 ms
// tick measures 0) says nothing and is left out; when every round is such,
// the ratio of all rounds pooled stands for them, as one round.
func ratios(a, b []sample, f func(a, b sample) float64) spread {
	v := make([]float64, 0, len(a))
	var pooledA, pooledB sample
	for i := range min(len(a), len(b)) {
		pooledA, pooledB = pooledA.add(a[i]), pooledB.add(b[i])
		if r := f(a[i], b[i]); !math.IsInf(r, 0) && !math.IsNaN(r) {
			v = append(v, r)
		}
	}
	if len(v) == 0 {
		if r := f(pooledA, pooledB); !math.IsInf(r, 0) && !math.IsNaN(r) {
			v = append(v, r)
		}
	}
	return spreadOf(v)
}

// add is s and t as one run.
func (s sample) add(t sample) sample {
	return sample{ops: s.ops + t.ops, elapsed: s.elapsed + t.elapsed, mallocs: s.mallocs + t.mallocs, cpu: s.cpu + t.cpu,
		commands: s.commands + t.commands, counted: s.counted || t.counted}
}

// cpuEfficiencyRatio is how many operations a does per CPU-second of its
// process for b's one: throughput with the cost of everything else on
// the machine (a co-located store, the load generator) taken out.
func cpuEfficiencyRatio(a, b sample) float64 {
	if a.cpuPerOp() == 0 || b.cpuPerOp() == 0 {
		return math.NaN() // below the clock's resolution: no figure
	}
	return float64(b.cpuPerOp()) / float64(a.cpuPerOp())
}

// throughputRatio is how many operations a does per b's one.
func throughputRatio(a, b sample) float64 { return a.perSecond() / b.perSecond() }

func medianOf(samples []sample, f func(sample) float64) float64 {
	v := make([]float64, len(samples))
	for i, s := range samples {
		v[i] = f(s)
	}
	return spreadOf(v).median
}

// interleave measures the sides in blocks of mirrored runs (see
// mirrored), blocks times, block b starting at side b (mod the sides).
// Every run does as many operations as the first side did in d on a first,
// timed run, after which every other side does as many once, unmeasured.
// It returns samples[side][block].
func interleave(ctx context.Context, blocks int, d time.Duration, settle func(context.Context, int) error, sides ...side) ([][]sample, error) {
	first, err := runFor(ctx, sides[0], d)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	n := max(first.ops, int64(sides[0].workers))
	for i := range sides {
		if i > 0 {
			if _, err := runN(ctx, sides[i], n); err != nil {
				return nil, fmt.Errorf("warm-up: %w", err)
			}
		}
		if settle != nil {
			if err := settle(ctx, i); err != nil {
				return nil, err
			}
		}
	}
	samples := make([][]sample, len(sides))
	for b := range blocks {
		got, err := mirrored(ctx, n, b, settle, sides...)
		if err != nil {
			return nil, fmt.Errorf("block %d: %w", b+1, err)
		}
		for k := range sides {
			samples[k] = append(samples[k], got[k])
		}
	}
	return samples, nil
}

// mirrored runs every side once in an order that starts at side first
// (mod the sides) and then once in the reverse order: ABBA for two sides,
// ABCCBA for three, so that a load that grows or shrinks steadily over
// the block (a neighbour's build, a collection growing) weighs on every
// side alike. Every run does n operations; settle, when not nil, runs
// after every run and before the next, untimed, to wait for the work a run
// left behind (the relay's ordering of its posts) so that it burdens no
// other run. It returns each side's two runs as one sample.
func mirrored(ctx context.Context, n int64, first int, settle func(context.Context, int) error, sides ...side) ([]sample, error) {
	order := make([]int, 0, 2*len(sides))
	for i := range sides {
		order = append(order, (first+i)%len(sides))
	}
	for i := len(sides) - 1; i >= 0; i-- {
		order = append(order, order[i])
	}
	runs := make([]sample, len(sides))
	for _, k := range order {
		got, err := runN(ctx, sides[k], n)
		if err != nil {
			return nil, err
		}
		runs[k] = runs[k].add(got)
		if settle != nil {
			if err := settle(ctx, k); err != nil {
				return nil, err
			}
		}
	}
	return runs, nil
}
