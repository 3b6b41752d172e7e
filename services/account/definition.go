package account

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
)

var definitionType = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// ValidDefinitionID reports whether id has the form of a definition id,
// as the store makes them: "def_" and 24 lowercase hex digits (96 random
// bits). Any other cannot name a definition.
func ValidDefinitionID(id string) bool { return validation.IsRandomID(id, "def_") }

// DefinitionInput is what a client (or an operator's JSON file) sends to
// create or replace a definition. Pointers tell a missing member from a zero
// value.
type DefinitionInput struct {
	Name    *string         `json:"name"`
	Type    *string         `json:"type"`
	Config  json.RawMessage `json:"config"`
	Enabled *bool           `json:"enabled"`
}

// Definition validates the input against the contract (name 1..200
// characters, type 1..64 of a-z0-9_-, config a JSON object of at most
// 64 KiB nesting at most validation.MaxJSONDepth levels) and applies the defaults (config {}, enabled true). The error is a
// *validation.Error listing every offending field.
func (in DefinitionInput) Definition(accountID string) (Definition, error) {
	var invalid validation.Collector
	d := Definition{AccountID: accountID, Enabled: true, Config: json.RawMessage(`{}`)}
	switch {
	case in.Name == nil || *in.Name == "":
		invalid.Add("name", "is required")
	case utf8.RuneCountInString(*in.Name) > MaxDefinitionName:
		invalid.Add("name", fmt.Sprintf("must be at most %d characters", MaxDefinitionName))
	default:
		d.Name = *in.Name
	}
	switch {
	case in.Type == nil || *in.Type == "":
		invalid.Add("type", "is required")
	case !definitionType.MatchString(*in.Type):
		invalid.Add("type", "must be 1 to 64 of a-z, 0-9, _ and -")
	default:
		d.Type = *in.Type
	}
	if cfg := bytes.TrimSpace(in.Config); len(cfg) > 0 && !bytes.Equal(cfg, []byte("null")) {
		var compact bytes.Buffer
		switch {
		case cfg[0] != '{' || json.Compact(&compact, cfg) != nil:
			invalid.Add("config", "must be a JSON object")
		case compact.Len() > MaxDefinitionConfig:
			invalid.Add("config", "must be at most 64 KiB")
		case validation.JSONDepth(compact.Bytes()) > validation.MaxJSONDepth:
			invalid.Add("config", fmt.Sprintf("must nest objects and arrays at most %d levels deep", validation.MaxJSONDepth))
		default:
			d.Config = compact.Bytes()
		}
	}
	if in.Enabled != nil {
		d.Enabled = *in.Enabled
	}
	if err := invalid.Err(); err != nil {
		return Definition{}, err
	}
	return d, nil
}
