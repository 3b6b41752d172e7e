package secretbox_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/acme/platform/pkg/secretbox"
)

func TestSealOpensOnlyForItsOwnerAndKey(t *testing.T) {
	raw, _ := secretbox.NewKey()
	key, err := secretbox.ParseKey(raw)
	if err != nil {
		t.Fatal(err)
	}
	box, err := secretbox.New(key)
	if err != nil {
		t.Fatal(err)
	}
	sealed := box.Seal("usr_1", []byte("the secret"))
	if bytes.Contains(sealed, []byte("the secret")) {
		t.Fatal("the sealed form contains the secret")
	}
	if got, err := box.Open("usr_1", sealed); err != nil || string(got) != "the secret" {
		t.Fatalf("Open = %q, %v", got, err)
	}
	if _, err := box.Open("usr_2", sealed); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("Open for another owner = %v, want ErrOpen", err)
	}
	other, _ := secretbox.NewKey()
	otherKey, _ := secretbox.ParseKey(other)
	otherBox, _ := secretbox.New(otherKey)
	if _, err := otherBox.Open("usr_1", sealed); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("Open under another key = %v, want ErrOpen", err)
	}
	if _, err := box.Open("usr_1", sealed[:5]); !errors.Is(err, secretbox.ErrOpen) {
		t.Fatalf("Open of a truncated seal = %v, want ErrOpen", err)
	}
}

func TestParseKey(t *testing.T) {
	for _, bad := range []string{"not base64!", "c2hvcnQ=", "   x"} {
		if _, err := secretbox.ParseKey(bad); err == nil {
			t.Errorf("ParseKey(%q) accepted", bad)
		}
	}
	if key, err := secretbox.ParseKey(""); key != nil || err != nil {
		t.Errorf("ParseKey(\"\") = %v, %v; want none", key, err)
	}
}
