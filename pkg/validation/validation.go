// Package validation is how domain code reports invalid input without
// knowing about HTTP: an *Error lists every offending field, and the HTTP
// layer (problem.From) turns it into a 400 validation_failed problem.
package validation

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Field names one invalid input field and why.
type Field struct {
	Name   string // JSON member or parameter, e.g. "name" or "participants[2]"
	Reason string // short, human-readable, e.g. "is required"
}

// Error lists every invalid field of one input.
type Error struct {
	Fields []Field
}

func (e *Error) Error() string {
	parts := make([]string, 0, len(e.Fields))
	for _, f := range e.Fields {
		parts = append(parts, f.Name+" "+f.Reason)
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Invalid is the *Error of one invalid field.
func Invalid(field, reason string) error {
	return &Error{Fields: []Field{{Name: field, Reason: reason}}}
}

// Collector gathers field errors while an input is checked.
type Collector struct {
	fields []Field
}

// Add records that field is invalid for reason.
func (c *Collector) Add(field, reason string) {
	c.fields = append(c.fields, Field{Name: field, Reason: reason})
}

// Err returns an *Error when anything was added, else nil.
func (c *Collector) Err() error {
	if len(c.fields) == 0 {
		return nil
	}
	return &Error{Fields: c.fields}
}

// NullableString reads the member field of a JSON merge patch that is a
// string or null: null clears it (a pointer to ""), a string is checked by
// check (a reason when invalid, "" when valid). It returns nil, and records
// why, when the member is neither or fails the check.
func (c *Collector) NullableString(field string, raw json.RawMessage, check func(string) string) *string {
	var s string
	raw = bytes.TrimSpace(raw)
	if bytes.Equal(raw, []byte("null")) {
		return &s
	}
	if json.Unmarshal(raw, &s) != nil {
		c.Add(field, "must be a JSON string or null")
		return nil
	}
	if reason := check(s); reason != "" {
		c.Add(field, reason)
		return nil
	}
	return &s
}

// NewRandomID returns prefix followed by 24 lowercase hex digits of 96
// random bits: the form IsRandomID accepts.
func NewRandomID(prefix string) string {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails since Go 1.24
	return prefix + hex.EncodeToString(b[:])
}

// IsRandomID reports whether id is prefix followed by 24 lowercase hex
// digits (96 random bits), the form of every id the services make.
func IsRandomID(id, prefix string) bool {
	rest, ok := strings.CutPrefix(id, prefix)
	if !ok || len(rest) != 24 {
		return false
	}
	for i := range len(rest) {
		if c := rest[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
