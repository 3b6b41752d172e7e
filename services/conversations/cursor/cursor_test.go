package cursor_test

import (
	"bytes"
	"encoding/base64"
	"errors"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
)

func codec(t testing.TB, key byte) *cursor.Codec {
	t.Helper()
	c, err := cursor.New(bytes.Repeat([]byte{key}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var (
	scope = cursor.Scope{AccountID: "acc_1", Participant: "usr_1", Status: ""}
	pos   = conversations.Position{Time: time.UnixMilli(1_700_000_000_123).UTC(), ID: "cnv_abc"}
)

func TestRoundTrip(t *testing.T) {
	c := codec(t, 1)
	s := c.Encode(scope, pos)
	got, err := c.Decode(scope, s)
	if err != nil || !got.Time.Equal(pos.Time) || got.ID != pos.ID {
		t.Fatalf("Decode(Encode(pos)) = %+v, %v", got, err)
	}
}

func TestRefused(t *testing.T) {
	c := codec(t, 1)
	s := c.Encode(scope, pos)
	raw, _ := base64.RawURLEncoding.DecodeString(s)
	flipped := func(i int) string {
		b := append([]byte(nil), raw...)
		b[i] ^= 0x01
		return base64.RawURLEncoding.EncodeToString(b)
	}
	cases := map[string]struct {
		codec *cursor.Codec
		scope cursor.Scope
		s     string
	}{
		"empty":                {c, scope, ""},
		"not base64":           {c, scope, "!!!"},
		"padded base64":        {c, scope, s + "=="},
		"too short":            {c, scope, base64.RawURLEncoding.EncodeToString([]byte{1, 2, 3})},
		"too long":             {c, scope, string(bytes.Repeat([]byte("A"), 600))},
		"altered version":      {c, scope, flipped(0)},
		"altered time":         {c, scope, flipped(5)},
		"altered id":           {c, scope, flipped(10)},
		"altered mac":          {c, scope, flipped(len(raw) - 1)},
		"truncated":            {c, scope, s[:len(s)-2]},
		"other key":            {codec(t, 2), scope, s},
		"other participant":    {c, cursor.Scope{AccountID: "acc_1", Participant: "usr_2"}, s},
		"other account":        {c, cursor.Scope{AccountID: "acc_2", Participant: "usr_1"}, s},
		"other status filter":  {c, cursor.Scope{AccountID: "acc_1", Participant: "usr_1", Status: "open"}, s},
		"scope field shifting": {c, cursor.Scope{AccountID: "acc_1usr_1", Participant: ""}, s},
		"other updatedAfter":   {c, cursor.Scope{AccountID: "acc_1", Participant: "usr_1", UpdatedAfter: "1700000000000"}, s},
		"a message listing":    {c, cursor.Scope{AccountID: "acc_1", Participant: "usr_1", ConversationID: "cnv_abc"}, s},
		"a client's listing":   {c, cursor.Scope{AccountID: "acc_1", Participant: "usr_1", Client: true}, s},
	}
	for name, tc := range cases {
		if _, err := tc.codec.Decode(tc.scope, tc.s); !errors.Is(err, cursor.ErrInvalid) {
			t.Errorf("%s: err = %v, want ErrInvalid", name, err)
		}
	}
}

// TestScopesAreDistinct: a cursor of one listing is refused by every other,
// in both directions: with and without updatedAfter, with another
// updatedAfter, for the messages of another conversation, and between a
// user's listings and a service client's.
func TestScopesAreDistinct(t *testing.T) {
	c := codec(t, 1)
	scopes := []cursor.Scope{
		scope,
		{AccountID: "acc_1", Participant: "usr_1", UpdatedAfter: "1700000000000"},
		{AccountID: "acc_1", Participant: "usr_1", UpdatedAfter: "1700000000001"},
		{AccountID: "acc_1", Participant: "usr_1", Status: "open", UpdatedAfter: "1700000000000"},
		{AccountID: "acc_1", Participant: "usr_1", ConversationID: "cnv_1"},
		{AccountID: "acc_1", Participant: "usr_1", ConversationID: "cnv_2"},
		{AccountID: "acc_1", Participant: "usr_2", ConversationID: "cnv_1"},
		// A service client's listings (account-wide), even under an id
		// equal to a user's.
		{AccountID: "acc_1", Participant: "usr_1", Client: true},
		{AccountID: "acc_1", Participant: "usr_1", Client: true, Status: "open"},
		{AccountID: "acc_1", Participant: "usr_1", Client: true, UpdatedAfter: "1700000000000"},
		{AccountID: "acc_1", Participant: "cli_1", Client: true},
		{AccountID: "acc_1", Participant: "usr_1", Client: true, ConversationID: "cnv_1"},
	}
	for i, a := range scopes {
		s := c.Encode(a, pos)
		for j, b := range scopes {
			_, err := c.Decode(b, s)
			if (err == nil) != (i == j) {
				t.Errorf("cursor of %+v decoded with %+v: err = %v", a, b, err)
			}
		}
	}
}

func TestShortKeyRefused(t *testing.T) {
	if _, err := cursor.New(make([]byte, 31)); err == nil {
		t.Fatal("31-byte key accepted")
	}
}

// FuzzDecode: no input may panic or decode to a position without the MAC.
func FuzzDecode(f *testing.F) {
	c := codec(f, 1)
	f.Add(c.Encode(scope, pos))
	f.Add("")
	f.Add("AQAAAYvMXe0bY252X2FiYw")
	f.Add("////")
	f.Fuzz(func(t *testing.T, s string) {
		got, err := c.Decode(scope, s)
		if err == nil && c.Encode(scope, got) != s {
			t.Fatalf("accepted %q, which is not the canonical cursor of %+v", s, got)
		}
	})
}
