package main

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"
)

func TestSpreadOf(t *testing.T) {
	for _, tc := range []struct {
		in   []float64
		want spread
	}{
		{[]float64{3, 1, 2}, spread{median: 2, min: 1, max: 3, n: 3}},
		{[]float64{4, 1, 3, 2}, spread{median: 2.5, min: 1, max: 4, n: 4}},
		{[]float64{0.9}, spread{median: 0.9, min: 0.9, max: 0.9, n: 1}},
		{nil, spread{}},
	} {
		if got := spreadOf(tc.in); got != tc.want {
			t.Errorf("spreadOf(%v) = %+v, want %+v", tc.in, got, tc.want)
		}
	}
}

// Ratios pair round i of one side with round i of the other: the rounds
// were measured next to each other.
func TestRatiosPairRounds(t *testing.T) {
	s := func(ops int64) sample { return sample{ops: ops, elapsed: time.Second} }
	a := []sample{s(90), s(50), s(200)}
	b := []sample{s(100), s(100), s(100)}
	got := ratios(a, b, throughputRatio)
	if got.median != 0.9 || got.min != 0.5 || got.max != 2 || got.n != 3 {
		t.Fatalf("ratios = %+v", got)
	}
}

// alternate runs every side once per round, rotating which goes first, and
// stops at the first failing operation.
func TestAlternate(t *testing.T) {
	var order []string
	mark := func(name string) side {
		return side{name: name, workers: 1, op: func(context.Context, int) error {
			if len(order) == 0 || order[len(order)-1] != name {
				order = append(order, name)
			}
			time.Sleep(time.Millisecond)
			return nil
		}}
	}
	samples, err := alternate(context.Background(), 3, 20*time.Millisecond, mark("a"), mark("b"))
	if err != nil {
		t.Fatal(err)
	}
	if len(samples) != 2 || len(samples[0]) != 3 || len(samples[1]) != 3 {
		t.Fatalf("samples %d×%d", len(samples), len(samples[0]))
	}
	for _, side := range samples {
		for _, s := range side {
			if s.ops == 0 {
				t.Fatalf("a run with no operations: %+v", s)
			}
		}
	}
	// Warm-ups a, b; then rounds a b, b a, a b (runs of one side merge).
	want := []string{"a", "b", "a", "b", "a", "b"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}

	boom := errors.New("boom")
	_, err = alternate(context.Background(), 2, 20*time.Millisecond, mark("a"),
		side{name: "bad", workers: 2, op: func(context.Context, int) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
}

// interleave mirrors every block (ABCCBA), starts each block one side
// further, gives every run of every side as many operations as the first
// side's calibration run did, and settles after every run.
func TestInterleave(t *testing.T) {
	var order []string
	ops := map[string]int{}
	mark := func(name string) side {
		return side{name: name, workers: 2, op: func(context.Context, int) error {
			time.Sleep(time.Millisecond)
			return nil
		}}
	}
	sides := []side{mark("a"), mark("b"), mark("c")}
	for i := range sides {
		op, name := sides[i].op, sides[i].name
		var mu sync.Mutex
		sides[i].op = func(ctx context.Context, w int) error {
			mu.Lock()
			ops[name]++
			mu.Unlock()
			return op(ctx, w)
		}
	}
	settled := 0
	samples, err := interleave(context.Background(), 2, 20*time.Millisecond, func(_ context.Context, k int) error {
		order = append(order, sides[k].name)
		settled++
		return nil
	}, sides...)
	if err != nil {
		t.Fatal(err)
	}
	// Calibration a, warm-ups b c; then a b c c b a, b c a a c b.
	want := []string{"a", "b", "c", "a", "b", "c", "c", "b", "a", "b", "c", "a", "a", "c", "b"}
	if !slices.Equal(order, want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	if len(samples) != 3 || len(samples[0]) != 2 {
		t.Fatalf("samples %d×%d", len(samples), len(samples[0]))
	}
	n := samples[0][0].ops
	if n == 0 || n%2 != 0 {
		t.Fatalf("a block of two runs did %d operations", n)
	}
	for k, side := range samples {
		for b, s := range side {
			if s.ops != n || s.elapsed <= 0 {
				t.Fatalf("side %d block %d: %+v, want %d operations", k, b, s, n)
			}
		}
	}
	if ops["b"] != ops["c"] || ops["b"] != 5*int(n/2) {
		t.Fatalf("operations done %v, want b and c %d each", ops, 5*n/2)
	}

	boom := errors.New("boom")
	_, err = interleave(context.Background(), 1, 20*time.Millisecond, nil, mark("a"),
		side{name: "bad", workers: 2, op: func(context.Context, int) error { return boom }})
	if !errors.Is(err, boom) {
		t.Fatalf("error %v, want boom", err)
	}
}
