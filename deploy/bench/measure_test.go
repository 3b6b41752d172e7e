package main

import (
	"context"
	"errors"
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
