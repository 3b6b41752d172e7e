package indexcheck

import (
	"slices"
)

// index is one index of a collection, as listIndexes describes it.
type index struct {
	name   string
	keys   []key
	unique bool
}

// idIndex is the index every collection has.
var idIndex = index{name: "_id_", keys: []key{{"_id", 1}}, unique: true}

// need is what an index must start with to serve q: its equality fields
// (in any order), then its sort (in order, or all reversed), then its
// range fields (in any order). Sort and range fields that are equality
// fields already, or range fields that are sort fields, are left out.
type need struct {
	eq, rng []string
	sort    []key
}

func needOf(q query) need {
	var n need
	for _, f := range q.fields {
		if f.class == classEq {
			n.eq = append(n.eq, f.name)
		}
	}
	for _, k := range q.sort {
		if !slices.Contains(n.eq, k.name) {
			n.sort = append(n.sort, k)
		}
	}
	for _, f := range q.fields {
		if (f.class == classRange || f.class == classOr) && !slices.Contains(n.eq, f.name) &&
			!slices.ContainsFunc(n.sort, func(k key) bool { return k.name == f.name }) {
			n.rng = append(n.rng, f.name)
		}
	}
	return n
}

func (n need) empty() bool { return len(n.eq)+len(n.sort)+len(n.rng) == 0 }

// pattern is the index that would serve the query.
func (n need) pattern() []key {
	var out []key
	for _, f := range n.eq {
		out = append(out, key{f, 1})
	}
	out = append(out, n.sort...)
	for _, f := range n.rng {
		out = append(out, key{f, 1})
	}
	return out
}

// servedBy reports whether ix serves n: see need.
func (n need) servedBy(ix index) bool {
	if len(ix.keys) < len(n.eq)+len(n.sort)+len(n.rng) {
		return false
	}
	names := func(keys []key) []string {
		out := make([]string, len(keys))
		for i, k := range keys {
			out[i] = k.name
		}
		return out
	}
	sameSet := func(a, b []string) bool {
		a, b = slices.Clone(a), slices.Clone(b)
		slices.Sort(a)
		slices.Sort(b)
		return slices.Equal(a, b)
	}
	keys := ix.keys
	if !sameSet(names(keys[:len(n.eq)]), n.eq) {
		return false
	}
	keys = keys[len(n.eq):]
	if len(n.sort) > 0 {
		flip := keys[0].dir * n.sort[0].dir
		for i, k := range n.sort {
			if keys[i].name != k.name || keys[i].dir*k.dir != flip {
				return false
			}
		}
	}
	keys = keys[len(n.sort):]
	return sameSet(names(keys[:len(n.rng)]), n.rng)
}

// pinned reports whether a unique index whose every key is an equality
// field of the query finds at most one document: the _id index for a
// lookup by id, or a unique key such as {account_id, caller, key}. The
// query's other conditions are checked on that one document.
func (n need) pinned(indexes []index) bool {
	for _, ix := range append([]index{idIndex}, indexes...) {
		if ix.unique && !slices.ContainsFunc(ix.keys, func(k key) bool { return !slices.Contains(n.eq, k.name) }) {
			return true
		}
	}
	return false
}

// serves reports whether the indexes serve q; when they do not, why
// tells what is missing.
func serves(q query, indexes []index) (ok bool, why string) {
	n := needOf(q)
	if n.pinned(indexes) {
		return true, ""
	}
	if n.empty() {
		if q.scanOK {
			return true, ""
		}
		return false, "it bounds no field an index could serve: it reads the whole collection"
	}
	candidates := indexes
	switch h := q.hint.(type) {
	case string:
		candidates = slices.DeleteFunc(slices.Clone(indexes), func(ix index) bool { return ix.name != h })
		if len(candidates) == 0 {
			return false, "its hint names no index of the collection"
		}
	case []key:
		candidates = slices.DeleteFunc(slices.Clone(indexes), func(ix index) bool { return !slices.Equal(ix.keys, h) })
		if len(candidates) == 0 {
			return false, "its hint is no index of the collection"
		}
	}
	for _, ix := range candidates {
		if n.servedBy(ix) {
			return true, ""
		}
	}
	if q.hint != nil {
		return false, "the index it hints does not serve it: it needs one that starts with " + pattern(n.pattern())
	}
	return false, "it needs an index that starts with " + pattern(n.pattern())
}
