package account_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/services/account"
)

// contractType is the contract's definition type: 1..64 of a-z0-9_-.
var contractType = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)

// FuzzDefinitionInput checks DefinitionInput.Definition on arbitrary
// members, present or not (config as arbitrary bytes, not only what a JSON
// decoder would produce). The error is nil or a *validation.Error naming
// only name, type and config; a valid result satisfies the contract's
// limits (name 1..200 characters, type 1..64 of a-z0-9_-, config a compact
// JSON object of at most 64 KiB, enabled default true) and keeps name and
// type as given. An input within those limits is accepted.
func FuzzDefinitionInput(f *testing.F) {
	const (
		hasName = 1 << iota
		hasType
		hasEnabled
		enabledValue
	)
	all := uint8(hasName | hasType)
	for _, seed := range []struct {
		name, typ, config string
		flags             uint8
	}{
		{"CRM", "salesforce", `{"token":"x","nested":{"a":[1,2,3]}}`, all},
		{"CRM", "salesforce", ``, all | hasEnabled},
		{"CRM", "salesforce", `null`, all | hasEnabled | enabledValue},
		{"CRM", "salesforce", ` { "a" : 1 } `, all},
		{"CRM", "salesforce", `[]`, all},
		{"CRM", "salesforce", `"text"`, all},
		{"CRM", "salesforce", `{"a":1} {"b":2}`, all},
		{"CRM", "salesforce", `{"a":`, all},
		{"CRM", "salesforce", `{"$where":"1","a.b":9007199254740993}`, all},
		{"CRM", "salesforce", `{"k":"` + strings.Repeat("v", 64<<10) + `"}`, all},
		{"", "", ``, all},
		{"", "", ``, 0},
		{strings.Repeat("é", 200), strings.Repeat("a", 64), `{}`, all},
		{strings.Repeat("é", 201), strings.Repeat("a", 65), `{}`, all},
		{"CRM", "Salesforce", `{}`, all},
		{"CRM", "sales force", `{}`, all},
		{"CRM", "sales\nforce", `{}`, all},
		{"\xff\xfe", "crm", `{}`, all},
		{"CRM", "crm", "{\"a\":\"\xff\"}", all},
		{"CRM", "crm", "\u00a0{}", all},
	} {
		f.Add(seed.name, seed.typ, []byte(seed.config), seed.flags)
	}

	f.Fuzz(func(t *testing.T, name, typ string, config []byte, flags uint8) {
		var in account.DefinitionInput
		if flags&hasName != 0 {
			in.Name = &name
		}
		if flags&hasType != 0 {
			in.Type = &typ
		}
		if flags&hasEnabled != 0 {
			enabled := flags&enabledValue != 0
			in.Enabled = &enabled
		}
		in.Config = json.RawMessage(config)

		d, err := in.Definition("acc_1")

		// What the contract accepts, worked out independently.
		nameOK := in.Name != nil && name != "" && utf8.RuneCountInString(name) <= account.MaxDefinitionName
		typeOK := in.Type != nil && contractType.MatchString(typ)
		cfg := bytes.TrimSpace(config)
		var compact bytes.Buffer
		configDefault := len(cfg) == 0 || string(cfg) == "null"
		configOK := configDefault ||
			(cfg[0] == '{' && json.Compact(&compact, cfg) == nil && compact.Len() <= account.MaxDefinitionConfig)

		if err != nil {
			var invalid *validation.Error
			if !errors.As(err, &invalid) || error(invalid) != err {
				t.Fatalf("error %v (%T) is not a *validation.Error", err, err)
			}
			if len(invalid.Fields) == 0 {
				t.Fatalf("validation error without fields: %v", err)
			}
			for _, fe := range invalid.Fields {
				if !slices.Contains([]string{"name", "type", "config"}, fe.Name) || fe.Reason == "" {
					t.Fatalf("field error %+v", fe)
				}
			}
			if nameOK && typeOK && configOK {
				t.Fatalf("refused an input within the contract (name %q, type %q, config %q): %v", name, typ, config, err)
			}
			return
		}

		if !nameOK || !typeOK || !configOK {
			t.Fatalf("accepted an input outside the contract (name %q, type %q, config %q)", name, typ, config)
		}
		if d.AccountID != "acc_1" || d.Name != name || d.Type != typ {
			t.Fatalf("definition %+v does not keep account, name %q and type %q", d, name, typ)
		}
		if n := utf8.RuneCountInString(d.Name); n < 1 || n > account.MaxDefinitionName {
			t.Fatalf("name of %d characters", n)
		}
		if !contractType.MatchString(d.Type) {
			t.Fatalf("type %q", d.Type)
		}
		if len(d.Config) == 0 || d.Config[0] != '{' || !json.Valid(d.Config) || len(d.Config) > account.MaxDefinitionConfig {
			t.Fatalf("config %q is not a JSON object of at most 64 KiB", d.Config)
		}
		var again bytes.Buffer
		if err := json.Compact(&again, d.Config); err != nil || !bytes.Equal(again.Bytes(), d.Config) {
			t.Fatalf("config %q is not compact", d.Config)
		}
		if configDefault && string(d.Config) != "{}" {
			t.Fatalf("config %q for an absent config, want {}", d.Config)
		}
		if want := in.Enabled == nil || *in.Enabled; d.Enabled != want {
			t.Fatalf("enabled = %v, want %v", d.Enabled, want)
		}
	})
}
