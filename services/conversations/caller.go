package conversations

import (
	"slices"
	"time"
)

// Caller is who makes a request, as the verified bearer token says. It is
// the one place that decides which conversations a request may see and
// change (MayAccess, mirrored by the stores' query filter), whom a message
// it posts is by (Author), under which name its idempotency keys are kept
// (KeyOwner), and who takes part in a conversation it creates
// (NewConversation.Conversation).
//
// A caller is a user or a service client of the account . A user sees the conversations they take part in. A service client
// takes part in none and sees every conversation of its account; what it
// may do with them is limited by its token's scopes, which the HTTP layer
// checks per route before any of this runs.
type Caller struct {
	AccountID string
	// ID is the token's sub: the user id, or the client id of a service
	// client.
	ID string
	// Client is set for a service client's token.
	Client bool
}

// MayAccess reports whether the caller may see and change c: a
// conversation of the caller's account in which the caller takes part, or
// any conversation of its account for a service client. Stores express
// the same rule as a query filter.
func (who Caller) MayAccess(c Conversation) bool {
	return c.AccountID == who.AccountID && (who.Client || slices.Contains(c.Participants, who.ID))
}

// Author is the author recorded on a message the caller posts: the user
// id, or the client id.
func (who Caller) Author() string { return who.ID }

// KeyOwner is the name under which the caller's idempotency keys are kept
// within its account: the user id, or "client:" and the client id, so that
// a user and a service client never share keys even if their ids were
// equal.
func (who Caller) KeyOwner() string {
	if who.Client {
		return "client:" + who.ID
	}
	return who.ID
}

// The rules below change a conversation in memory; stores write the
// result with one compare-and-set on the version they read.

// nextUpdatedAt is the updatedAt of a change made at now: later than the
// previous one by at least a millisecond (the stored precision), so every
// change moves updatedAt forward, even within one millisecond or when the
// clock of this replica is behind the one that made the previous change.
func (c Conversation) nextUpdatedAt(now time.Time) time.Time {
	return later(now.UTC().Truncate(time.Millisecond), c.UpdatedAt.Add(time.Millisecond))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// MessageTime is the createdAt of a message posted now to c: now, or just
// after c's updatedAt when that is not earlier, so that the message moves
// updatedAt forward and becomes the conversation's newest activity.
func (c Conversation) MessageTime(now time.Time) time.Time {
	return c.nextUpdatedAt(now)
}

// RecordMessage applies a stored message created at to c and reports
// whether c changed. A message is new to c when it is later than c's
// lastMessageAt or than its updatedAt; then lastMessageAt moves to it
// (never backwards), updatedAt moves forward to it (at least a millisecond
// past the previous change), and a snoozed conversation reopens, unless it
// changed after the message was made (a snooze that came later stays). It
// is how a post completes and how a read repairs a post that stopped after
// storing its message: applying it twice changes nothing the second time.
func (c *Conversation) RecordMessage(at time.Time) bool {
	newest := c.LastMessageAt == nil || at.After(*c.LastMessageAt)
	if !newest && !at.After(c.UpdatedAt) {
		return false
	}
	if c.Status == StatusSnoozed && at.After(c.UpdatedAt) {
		c.Status = StatusOpen
	}
	if newest {
		t := at
		c.LastMessageAt = &t
	}
	c.UpdatedAt = later(at, c.UpdatedAt.Add(time.Millisecond))
	return true
}

// Apply changes c as p says at now and reports whether anything changed;
// a patch that sets the values c already has changes nothing.
func (p Patch) Apply(c *Conversation, now time.Time) bool {
	changed := false
	if p.Subject != nil && *p.Subject != c.Subject {
		c.Subject, changed = *p.Subject, true
	}
	if p.Status != nil && *p.Status != c.Status {
		c.Status, changed = *p.Status, true
	}
	if changed {
		c.UpdatedAt = c.nextUpdatedAt(now)
	}
	return changed
}

// AddParticipant adds userID to c at now; false when already there,
// ErrTooManyParticipants when c is full.
func (c *Conversation) AddParticipant(userID string, now time.Time) (bool, error) {
	if slices.Contains(c.Participants, userID) {
		return false, nil
	}
	if len(c.Participants) >= MaxParticipants {
		return false, ErrTooManyParticipants
	}
	c.Participants = append(slices.Clip(c.Participants), userID)
	c.UpdatedAt = c.nextUpdatedAt(now)
	return true, nil
}

// RemoveParticipant removes userID from c at now; false when not there,
// ErrLastParticipant when userID is the only one.
func (c *Conversation) RemoveParticipant(userID string, now time.Time) (bool, error) {
	i := slices.Index(c.Participants, userID)
	if i < 0 {
		return false, nil
	}
	if len(c.Participants) == 1 {
		return false, ErrLastParticipant
	}
	c.Participants = slices.Delete(slices.Clone(c.Participants), i, i+1)
	c.UpdatedAt = c.nextUpdatedAt(now)
	return true, nil
}

// eventsOfChange are the events a change of a conversation records
// (besides message.created, which the message records): a changed subject
// or status is conversation.updated with the previous values, each added
// or removed participant its own event. Moving lastMessageAt or updatedAt
// alone records nothing.
func eventsOfChange(from, to Conversation) []Event {
	var events []Event
	add := func(t EventType, audience []string, data EventData) {
		data.Conversation = to
		events = append(events, Event{
			ID: NewEventID(), AccountID: to.AccountID, Type: t, Timestamp: to.UpdatedAt,
			ConversationID: to.ID, Audience: audience, Data: data,
		})
	}
	changes := map[string]any{}
	if from.Subject != to.Subject {
		changes["subject"] = from.Subject
	}
	if from.Status != to.Status {
		changes["status"] = from.Status
	}
	if len(changes) > 0 {
		add(EventConversationUpdated, to.Participants, EventData{Changes: changes})
	}
	for _, u := range to.Participants {
		if !slices.Contains(from.Participants, u) {
			add(EventParticipantAdded, to.Participants, EventData{UserID: u})
		}
	}
	for _, u := range from.Participants {
		if !slices.Contains(to.Participants, u) {
			add(EventParticipantRemoved, append(slices.Clone(to.Participants), u), EventData{UserID: u})
		}
	}
	return events
}

// createdEvent is the event of a conversation's creation.
func createdEvent(c Conversation) Event {
	return Event{
		ID: NewEventID(), AccountID: c.AccountID, Type: EventConversationCreated, Timestamp: c.CreatedAt,
		ConversationID: c.ID, Audience: c.Participants, Data: EventData{Conversation: c},
	}
}

// messageEvent is the event of a message posted to conv (the conversation
// as the post reads it; its data shows it as the post records it).
func messageEvent(conv Conversation, m Message) Event {
	after := conv
	if after.RecordMessage(m.CreatedAt) {
		after.Version++
	}
	msg := m
	return Event{
		ID: NewEventID(), AccountID: m.AccountID, Type: EventMessageCreated, Timestamp: m.CreatedAt,
		ConversationID: conv.ID, Audience: conv.Participants, Data: EventData{Conversation: after, Message: &msg},
	}
}
