package conversations

import "github.com/acme/platform/pkg/validation"

// The forms of the ids the API takes in paths and bodies. Every id is
// made by one service with a prefix and 96 random bits in lowercase hex
// (NewConversationID here; the account service's users and service
// clients), so anything else cannot name a stored resource: it is refused
// before it reaches the store, and never stored.

// ValidConversationID reports whether id has the form of a conversation
// id: "cnv_" and 24 lowercase hex digits.
func ValidConversationID(id string) bool { return validation.IsRandomID(id, "cnv_") }

// ValidMessageID reports whether id has the form of a message id: "msg_"
// and 24 lowercase hex digits.
func ValidMessageID(id string) bool { return validation.IsRandomID(id, "msg_") }

// ValidUserID reports whether id has the form of a user id, the `sub` of
// a user's token as the account service makes it: "usr_" and 24
// lowercase hex digits. Participants are user ids; a service client
// ("cli_…") takes part in no conversation.
func ValidUserID(id string) bool { return validation.IsRandomID(id, "usr_") }

// UserIDForm says what ValidUserID accepts, for error messages.
const UserIDForm = `must be a user id: "usr_" and 24 lowercase hex digits`
