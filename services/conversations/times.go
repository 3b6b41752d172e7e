package conversations

import (
	"encoding/json"
	"errors"
	"time"
)

// Times a caller supplies are checked against ranges every later read can
// serve, and stored in UTC at millisecond precision (the stored
// precision), so that each is written back in RFC 3339 exactly as every
// client can parse it, and each bound into a cursor or a next link is one
// the service accepts again.
//
// The widest range of all is that of RFC 3339 written in UTC, years 0001
// to 9999 (year 0000 is valid RFC 3339 but not a year many languages'
// date types hold, Python's among them): MinTime to MaxTime.
var (
	MinTime = time.Date(1, time.January, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9999, time.December, 31, 23, 59, 59, int(999*time.Millisecond), time.UTC)
)

// epoch is the earliest lastMessageAt: no message of this system, nor of
// one it imports from, was written before 1970.
var epoch = time.Unix(0, 0).UTC()

// LastMessageAtRange is the range of a lastMessageAt given at creation
// (a conversation imported from elsewhere) at now: from 1970-01-01 to a
// day after now. A day of slack takes clocks that are off, or a time
// zone got wrong; a message far in the future would pin the conversation
// above every other for years, since lastMessageAt never moves backwards.
func LastMessageAtRange(now time.Time) (earliest, latest time.Time) {
	return epoch, now.UTC().Add(24 * time.Hour).Truncate(time.Millisecond)
}

// ParseTime parses an RFC 3339 date-time a caller sends (any offset) and
// returns it in UTC, truncated to milliseconds. Times outside MinTime to
// MaxTime once in UTC are refused (year 0000 with a positive offset is year
// -1 in UTC; 9999-12-31T23:59:59-01:00 is year 10000), so every time it
// returns can be written back in RFC 3339.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, err
	}
	t = t.UTC().Truncate(time.Millisecond)
	if t.Before(MinTime) || t.After(MaxTime) {
		return time.Time{}, errOutOfRange
	}
	return t, nil
}

var errOutOfRange = errors.New("time outside 0001-01-01T00:00:00Z to 9999-12-31T23:59:59.999Z")

// FormatTime writes t in UTC as the API does in links and messages, with
// milliseconds: 2024-05-01T12:00:00.000Z.
func FormatTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// servable returns t when RFC 3339 can write it, else the nearest end of
// MinTime to MaxTime. Versions before times were checked stored any
// lastMessageAt a caller sent (year -1 or 10000 among them), which the
// JSON encoder refuses; such values are served clamped (tolerated, not
// rewritten: see docs/decisions.md).
func servable(t time.Time) time.Time {
	switch t = t.UTC(); {
	case t.Before(MinTime):
		return MinTime
	case t.After(MaxTime):
		return MaxTime
	}
	return t
}

// MarshalJSON writes c as the API serves it, every time in a range RFC
// 3339 (and every client) can hold.
func (c Conversation) MarshalJSON() ([]byte, error) {
	type plain Conversation // without this method
	out := plain(c)
	out.CreatedAt, out.UpdatedAt = servable(c.CreatedAt), servable(c.UpdatedAt)
	if c.LastMessageAt != nil {
		t := servable(*c.LastMessageAt)
		out.LastMessageAt = &t
	}
	return json.Marshal(out)
}
