package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
)

// streamMemoryLimit is the target of the stream-memory row: what unread
// streams may add to a replica's peak memory, whatever the backlog.
const streamMemoryLimit = 64 // MiB

// streamsPerCaller is how many of the unread streams one caller opens:
// the service's default bound per caller.
const streamsPerCaller = 10

// streamMemoryRows measures what streams that do not read cost a
// replica's memory: a backlog of -stream-backlog bytes of events in one
// account, written straight into the log, then -unread-streams streams
// from after=0 whose bodies are never read, so that the service's writes
// block. It waits until the conversations process's RSS stops growing (or
// 20 s) and reports the increase of its peak RSS (VmHWM).
func streamMemoryRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	client := loopbackClient(o.workers)
	// The streams are spread over callers of streamsPerCaller each (the
	// service's default bound per caller), all service clients of one account.
	bearers := make([]string, (o.unreadStreams+streamsPerCaller-1)/streamsPerCaller)
	for i := range bearers {
		var err error
		if bearers[i], err = s.clientCredentialsToken(ctx, client, account.ScopeConversationsRead); err != nil {
			return nil, err
		}
	}
	bearer := bearers[0]
	claims, err := jwtClaims(bearer)
	if err != nil {
		return nil, err
	}
	accountID, _ := claims["account_id"].(string)
	began := time.Now()
	n, bytes, err := s.seedEvents(ctx, accountID, o.streamBacklog)
	if err != nil {
		return nil, fmt.Errorf("seed events: %w", err)
	}
	seeded := time.Since(began)
	// The service serves what was written: the newest event is in the feed.
	page, _, err := readFeed(ctx, client, s.convURL, bearer, int64(n-1), 1)
	if err != nil {
		return nil, err
	}
	if len(page) != 1 || page[0].Sequence != int64(n) {
		return nil, fmt.Errorf("the feed after %d holds %d events, not the seeded %d", n-1, len(page), n)
	}

	rssBefore, peakBefore := s.conv.RSS(), s.conv.PeakRSS()
	addr := strings.TrimPrefix(s.convURL, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range o.unreadStreams {
		c, err := openUnreadStream(ctx, addr, bearers[i/streamsPerCaller])
		if err != nil {
			return nil, err
		}
		conns = append(conns, c)
	}
	settled, err := s.waitRSSSettled(ctx, max(o.serviceRun, time.Second), 20*time.Second)
	if err != nil {
		return nil, err
	}
	rssAfter, peakAfter := s.conv.RSS(), s.conv.PeakRSS()
	dropped := "?"
	if v, err := s.metric(ctx, "conversations_event_streams_dropped_total"); err == nil {
		dropped = fmt.Sprint(v)
	}
	growth := peakAfter - peakBefore
	return []row{{
		measure: fmt.Sprintf("Events: %d streams from after=0 that never read (service clients: %d), over a backlog of %.1f MiB (%s events) in one account, one replica",
			o.unreadStreams, len(bearers), float64(bytes)/(1<<20), thousands(float64(n))),
		subject: fmt.Sprintf("peak RSS of the conversations process %.0f → %.0f MiB, RSS %.0f → %.0f MiB (%s after the streams opened); %s streams dropped as slow; backlog written in %s",
			peakBefore, peakAfter, rssBefore, rssAfter, settled.Round(100*time.Millisecond), dropped, seeded.Round(time.Millisecond)),
		against: "–",
		value:   fmt.Sprintf("**%.0f** MiB more peak RSS", growth),
		target:  fmt.Sprintf("≤ %d MiB", streamMemoryLimit), hasGoal: true, met: growth <= streamMemoryLimit, id: "stream-memory",
	}}, nil
}

// seedEvents writes message.created events of about size bytes in all,
// numbered from 1, into the account's log, as the relay stores them, and
// returns how many it wrote and their bytes of data. The API would take
// minutes for the same on the embedded store.
func (s *stack) seedEvents(ctx context.Context, accountID string, size int) (int, int, error) {
	now := time.Now().UTC().Truncate(time.Millisecond)
	conv := conversations.Conversation{
		ID: conversations.NewConversationID(), Subject: "Bench stream memory", Status: conversations.StatusOpen,
		Participants: []string{"usr_00000000000000000000beef"}, CreatedAt: now, UpdatedAt: now,
	}
	body := strings.Repeat(benchMessageBody+" ", conversations.MaxMessageBodyLen*4/5/(len(benchMessageBody)+1))
	events := s.client.Database(s.convDB).Collection("events")
	const batch = 100
	var docs []any
	n, bytes := 0, 0
	for bytes < size {
		at := now.Add(time.Duration(n) * time.Millisecond)
		conv.LastMessageAt, conv.UpdatedAt = &at, at
		data, err := json.Marshal(conversations.EventData{Conversation: conv, Message: &conversations.Message{
			ID: conversations.NewMessageID(), ConversationID: conv.ID, Author: conv.Participants[0], Body: body,
			Metadata: json.RawMessage(`{}`), CreatedAt: at,
		}})
		if err != nil {
			return 0, 0, err
		}
		n++
		bytes += len(data)
		docs = append(docs, mongostore.EventDocument{
			ID: conversations.NewEventID(), AccountID: accountID, Sequence: int64(n), Type: string(conversations.EventMessageCreated),
			Timestamp: at, ConversationID: conv.ID, Audience: conv.Participants, Data: string(data),
		})
		if len(docs) == batch || bytes >= size {
			if _, err := events.InsertMany(ctx, docs); err != nil {
				return 0, 0, err
			}
			docs = docs[:0]
		}
	}
	return n, bytes, nil
}

// openUnreadStream opens GET /v1/events/stream?after=0 on a connection of
// its own and reads the status line only: the body is never read.
func openUnreadStream(ctx context.Context, addr, bearer string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_, err = fmt.Fprintf(c, "GET /v1/events/stream?after=0 HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nAccept: text/event-stream\r\n\r\n", addr, bearer)
	if err != nil {
		c.Close()
		return nil, err
	}
	status := make([]byte, len("HTTP/1.1 200"))
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := io.ReadFull(c, status); err != nil {
		c.Close()
		return nil, fmt.Errorf("open a stream: %w", err)
	}
	_ = c.SetReadDeadline(time.Time{})
	if string(status) != "HTTP/1.1 200" {
		c.Close()
		return nil, fmt.Errorf("open a stream: answered %q", status)
	}
	return c, nil
}

// waitRSSSettled waits until the conversations process's RSS has not
// grown by a MiB for quiet, or until limit, and returns how long it
// waited.
func (s *stack) waitRSSSettled(ctx context.Context, quiet, limit time.Duration) (time.Duration, error) {
	began := time.Now()
	high, grew := s.conv.RSS(), began
	for time.Since(grew) < quiet && time.Since(began) < limit {
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
		if rss := s.conv.RSS(); rss > high+1 {
			high, grew = rss, time.Now()
		}
	}
	return time.Since(began), nil
}
