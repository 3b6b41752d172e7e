package indexcheck

import (
	"fmt"
	"slices"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// query is the shape of one statement of a command: which fields its
// filter bounds and how, its sort and its hint. Values are left out.
type query struct {
	collection string
	command    string // find, update, delete, findAndModify, count, distinct, aggregate
	fields     []field
	sort       []key
	hint       any // an index name (string), a key pattern ([]key) or nil
	scanOK     bool
}

// field is one field of a filter and the class of its condition.
type field struct {
	name  string
	class string // classEq, classRange, or the operators of a residual condition
}

// key is one key of an index or a sort: a field and its direction.
type key struct {
	name string
	dir  int
}

const (
	classEq    = "eq"
	classRange = "range"
	classOr    = "$or range"
)

// queriesOf returns the statements of a command that carry a filter; a
// command of another kind returns none.
func queriesOf(name string, cmd bson.Raw) []query {
	coll, _ := cmd.Lookup(name).StringValueOK()
	q := query{collection: coll, command: name}
	switch name {
	case "find":
		q.fields = filterFields(doc(cmd, "filter"))
		q.sort = keysOf(doc(cmd, "sort"))
		q.hint = hintOf(cmd.Lookup("hint"))
	case "findAndModify":
		q.fields = filterFields(doc(cmd, "query"))
		q.sort = keysOf(doc(cmd, "sort"))
		q.hint = hintOf(cmd.Lookup("hint"))
	case "count", "distinct":
		q.fields = filterFields(doc(cmd, "query"))
		q.hint = hintOf(cmd.Lookup("hint"))
		// A count of everything reads the collection's metadata.
		q.scanOK = name == "count" && len(q.fields) == 0
	case "aggregate":
		stages, _ := cmd.Lookup("pipeline").ArrayOK()
		values, _ := stages.Values()
		for i, v := range values {
			stage, _ := v.DocumentOK()
			if m, ok := stage.Lookup("$match").DocumentOK(); ok && i == 0 {
				q.fields = filterFields(m)
				continue
			}
			if s, ok := stage.Lookup("$sort").DocumentOK(); ok && i <= 1 {
				q.sort = keysOf(s)
			}
			break
		}
		q.hint = hintOf(cmd.Lookup("hint"))
	case "update", "delete":
		list, filterKey := "updates", "q"
		if name == "delete" {
			list = "deletes"
		}
		statements, _ := cmd.Lookup(list).ArrayOK()
		values, _ := statements.Values()
		var out []query
		for _, v := range values {
			st, _ := v.DocumentOK()
			one := q
			one.fields = filterFields(doc(st, filterKey))
			one.sort = keysOf(doc(st, "sort"))
			one.hint = hintOf(st.Lookup("hint"))
			out = append(out, one)
		}
		return out
	default:
		return nil
	}
	return []query{q}
}

func doc(d bson.Raw, name string) bson.Raw {
	v, _ := d.Lookup(name).DocumentOK()
	return v
}

// keysOf reads a sort or an index's key pattern.
func keysOf(d bson.Raw) []key {
	elems, _ := d.Elements()
	out := make([]key, 0, len(elems))
	for _, e := range elems {
		dir := 1
		if n, ok := e.Value().AsInt64OK(); ok && n < 0 {
			dir = -1
		} else if f, ok := e.Value().DoubleOK(); ok && f < 0 {
			dir = -1
		}
		out = append(out, key{name: e.Key(), dir: dir})
	}
	return out
}

func hintOf(v bson.RawValue) any {
	if s, ok := v.StringValueOK(); ok {
		return s
	}
	if d, ok := v.DocumentOK(); ok {
		return keysOf(d)
	}
	return nil
}

// filterFields classifies the conditions of a filter, field by field, in
// the order they appear (see the package doc for the rules).
func filterFields(filter bson.Raw) []field {
	var out []field
	add := func(name, class string) {
		i := slices.IndexFunc(out, func(f field) bool { return f.name == name })
		if i < 0 {
			out = append(out, field{name, class})
			return
		}
		// Equality binds tighter than a range, a range than a residual.
		if rank(class) > rank(out[i].class) {
			out[i].class = class
		}
	}
	elems, _ := filter.Elements()
	for _, e := range elems {
		name := e.Key()
		switch name {
		case "$and":
			for _, sub := range subDocs(e.Value()) {
				for _, f := range filterFields(sub) {
					add(f.name, f.class)
				}
			}
			continue
		case "$or":
			for _, sub := range subDocs(e.Value()) {
				for _, f := range filterFields(sub) {
					add(f.name, classOr)
				}
			}
			continue
		}
		if strings.HasPrefix(name, "$") {
			continue // $nor, $expr, $where, $comment: no bound
		}
		add(name, classOf(e.Value()))
	}
	return out
}

func subDocs(v bson.RawValue) []bson.Raw {
	arr, _ := v.ArrayOK()
	values, _ := arr.Values()
	var out []bson.Raw
	for _, v := range values {
		if d, ok := v.DocumentOK(); ok {
			out = append(out, d)
		}
	}
	return out
}

// classOf is the class of one field's condition: a value (or $eq, $in) is
// equality; $gt, $gte, $lt, $lte a range; any other operator ($ne, $nin,
// $exists, $not, $regex, …) bounds nothing and is named as it is.
func classOf(v bson.RawValue) string {
	d, ok := v.DocumentOK()
	if !ok {
		return classEq
	}
	elems, _ := d.Elements()
	if len(elems) == 0 || !strings.HasPrefix(elems[0].Key(), "$") {
		return classEq // an embedded document's equality
	}
	class := ""
	var residual []string
	for _, e := range elems {
		switch e.Key() {
		case "$eq", "$in":
			class = classEq
		case "$gt", "$gte", "$lt", "$lte":
			if class != classEq {
				class = classRange
			}
		default:
			residual = append(residual, e.Key())
		}
	}
	if class != "" {
		return class
	}
	return strings.Join(residual, ",")
}

func rank(class string) int {
	switch class {
	case classEq:
		return 3
	case classRange, classOr:
		return 2
	}
	return 1
}

// shape prints the query without its values, as it appears in a failure
// and in an allow-list entry: "find {account_id: eq, version: $exists} sort {updated_at: -1}".
func (q query) shape() string {
	var b strings.Builder
	b.WriteString(q.command + " {")
	for i, f := range q.fields {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s: %s", f.name, f.class)
	}
	b.WriteString("}")
	if len(q.sort) > 0 {
		b.WriteString(" sort " + pattern(q.sort))
	}
	switch h := q.hint.(type) {
	case string:
		b.WriteString(" hint " + h)
	case []key:
		b.WriteString(" hint " + pattern(h))
	}
	return b.String()
}

func pattern(keys []key) string {
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s: %d", k.name, k.dir)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
