package conversations_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/acme/platform/pkg/validation"
	"github.com/acme/platform/services/conversations"
)

func participants(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("usr_%024x", i)
	}
	return out
}

// A service client is no participant of what it creates: it names 1 to 100
// participants itself, where a user is added to those they name.
func TestNewConversationOfAServiceClient(t *testing.T) {
	client := conversations.Caller{AccountID: "acc_1", ID: "cli_1", Client: true}
	user := conversations.Caller{AccountID: "acc_1", ID: participants(1)[0]}
	for _, tc := range []struct {
		name  string
		who   conversations.Caller
		given []string
		want  []string // nil: refused, naming participants
	}{
		{"client names one", client, []string{participants(2)[1], participants(2)[1]}, participants(2)[1:]},
		{"client names a hundred", client, participants(100), participants(100)},
		{"client names none", client, nil, nil},
		{"client names 101", client, participants(101), nil},
		{"user names none", user, nil, participants(1)},
		{"user and 99 others", user, participants(100), participants(100)},
		{"user and 100 others", user, participants(101), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := conversations.NewConversation{Participants: tc.given}.Conversation(tc.who)
			if tc.want == nil {
				var invalid *validation.Error
				if !errors.As(err, &invalid) || len(invalid.Fields) != 1 || invalid.Fields[0].Name != "participants" {
					t.Fatalf("err = %v, want a validation error of participants", err)
				}
				return
			}
			if err != nil || !slices.Equal(c.Participants, tc.want) || c.AccountID != "acc_1" {
				t.Fatalf("%+v, %v; want participants %v", c, err, tc.want)
			}
		})
	}
}

// A user may access the conversations they take part in; a service client
// every one of its account; nobody another account's.
func TestMayAccess(t *testing.T) {
	c := conversations.Conversation{AccountID: "acc_1", Participants: []string{"usr_1"}}
	for who, want := range map[conversations.Caller]bool{
		{AccountID: "acc_1", ID: "usr_1"}:               true,
		{AccountID: "acc_1", ID: "usr_2"}:               false,
		{AccountID: "acc_2", ID: "usr_1"}:               false,
		{AccountID: "acc_1", ID: "cli_1", Client: true}: true,
		{AccountID: "acc_2", ID: "cli_1", Client: true}: false,
	} {
		if got := who.MayAccess(c); got != want {
			t.Errorf("%+v: MayAccess = %v, want %v", who, got, want)
		}
	}
	user := conversations.Caller{AccountID: "acc_1", ID: "same"}
	client := conversations.Caller{AccountID: "acc_1", ID: "same", Client: true}
	if user.KeyOwner() == client.KeyOwner() || user.KeyOwner() != "same" {
		t.Fatalf("key owners %q and %q", user.KeyOwner(), client.KeyOwner())
	}
}
