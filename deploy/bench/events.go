package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/conversations/mongostore"
)

type feedEvent struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Sequence int64  `json:"sequence"`
	Data     struct {
		Message *struct {
			ID string `json:"id"`
		} `json:"message"`
	} `json:"data"`
}

// eventsRows measures the events:
//
//   - a feed page of 100 events (GET /v1/events as a service client with
//     conversations:read) against a driver find of the same 100
//     documents;
//   - the time from a change (a message posted) to its event in the feed
//     (polled) and on an open stream, p50 and p99, with -idle-streams idle
//     streams open on the replica;
//   - the replica's CPU per second with those idle streams and nothing
//     happening, and the reads of the log they cause per second (the
//     replica's conversations_event_stream_reads_total), against 10 idle
//     streams: the reads must not grow with the streams.
func eventsRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	client := loopbackClient(o.workers)
	userBearer, err := s.login(ctx, client, 2%o.workers)
	if err != nil {
		return nil, err
	}
	clientBearer, err := s.clientCredentialsToken(ctx, client, account.ScopeConversationsRead)
	if err != nil {
		return nil, err
	}
	claims, err := jwtClaims(clientBearer)
	if err != nil {
		return nil, err
	}
	accountID, _ := claims["account_id"].(string)
	conv, err := s.createConversation(ctx, client, userBearer, "Bench events")
	if err != nil {
		return nil, err
	}
	// At least 101 events: one page of 100 after the first.
	for range 101 {
		if status, body, err := postWithBearer(ctx, client, userBearer, s.convURL+messagesPath(conv), []byte(`{"body":"event"}`)); err != nil || status != http.StatusCreated {
			return nil, fmt.Errorf("post message: %d %s %v", status, body, err)
		}
	}
	var after int64
	for {
		page, _, err := readFeed(ctx, client, s.convURL, clientBearer, 0, 1000)
		if err != nil {
			return nil, err
		}
		if len(page) > 100 {
			after = page[len(page)-101].Sequence
			break
		}
		time.Sleep(10 * time.Millisecond) // the relay orders them
	}

	feedURL := fmt.Sprintf("%s/v1/events?after=%d&limit=100", s.convURL, after)
	feed := func(ctx context.Context, _ int) error {
		status, _, body, err := get(ctx, client, feedURL, clientBearer)
		if err != nil {
			return err
		}
		var page []json.RawMessage
		if status != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page) != 100 {
			return fmt.Errorf("GET %s answered %d: %.200s", feedURL, status, body)
		}
		return nil
	}
	events := s.client.Database(s.convDB).Collection("events")
	filter := bson.D{{Key: "account_id", Value: accountID}, {Key: "sequence", Value: bson.D{{Key: "$gt", Value: after}}}}
	findOpts := options.Find().SetSort(bson.D{{Key: "sequence", Value: 1}}).SetLimit(100).SetHint("by_sequence")
	driverFind := func(ctx context.Context, _ int) error {
		cur, err := events.Find(ctx, filter, findOpts)
		if err != nil {
			return err
		}
		var docs []mongostore.EventDocument
		if err := cur.All(ctx, &docs); err != nil {
			return err
		}
		if len(docs) != 100 {
			return fmt.Errorf("driver find: %d events", len(docs))
		}
		return nil
	}
	feedSamples, err := alternate(ctx, o.rounds, o.serviceRun,
		side{name: "GET /v1/events", workers: o.workers, op: feed},
		side{name: "driver find", workers: o.workers, op: driverFind, commands: s.driverCmds.read})
	if err != nil {
		return nil, fmt.Errorf("events feed: %w", err)
	}
	vsFind := ratios(feedSamples[0], feedSamples[1], throughputRatio)
	perSecond := func(s []sample) string { return thousands(medianOf(s, sample.perSecond)) + "/s" }
	counted, err := s.quietCount(ctx, side{name: "GET /v1/events", workers: o.workers, op: feed})
	if err != nil {
		return nil, err
	}
	rows := []row{{
		measure: fmt.Sprintf("Events: GET /v1/events, a page of 100, vs driver find of the same 100, %d concurrent", o.workers),
		subject: perSecond(feedSamples[0]) + " pages",
		against: perSecond(feedSamples[1]) + " (the same filter, sort, limit and hint)",
		ratio:   vsFind, unit: "× driver", target: "≥ 0.90", hasGoal: true, met: vsFind.median >= 0.90, id: "events",
		cmds: cmdsCell(counted, feedSamples[1]),
	}}

	// Idle streams: another account's events would be idle too; these
	// are the bench account's, filtered to a type the bench never makes,
	// so that the hub reads for them and hands them nothing.
	streamClient := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}}
	idle := func(n int) (func(), error) {
		var bodies []io.Closer
		closeAll := func() {
			for _, b := range bodies {
				b.Close()
			}
		}
		for range n {
			body, err := openStream(ctx, streamClient, s.convURL+"/v1/events/stream?types=conversation.participant_removed", clientBearer, -1)
			if err != nil {
				closeAll()
				return nil, err
			}
			bodies = append(bodies, body)
		}
		return closeAll, nil
	}
	idleCost := func(n int) (cpuPerSecond time.Duration, readsPerSecond float64, err error) {
		closeAll, err := idle(n)
		if err != nil {
			return 0, 0, err
		}
		defer closeAll()
		// Settled: each stream's first read of the log (from its own
		// position, at most a few at once) is over once the count stops.
		if err := s.settled(ctx, "conversations_event_stream_reads_total"); err != nil {
			return 0, 0, err
		}
		cpu0, err := s.conv.CPUTime()
		if err != nil {
			return 0, 0, err
		}
		reads0, err := s.metric(ctx, "conversations_event_stream_reads_total")
		if err != nil {
			return 0, 0, err
		}
		start := time.Now()
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(o.serviceRun):
		}
		elapsed := time.Since(start)
		cpu1, err := s.conv.CPUTime()
		if err != nil {
			return 0, 0, err
		}
		reads1, err := s.metric(ctx, "conversations_event_stream_reads_total")
		if err != nil {
			return 0, 0, err
		}
		return time.Duration(float64(cpu1-cpu0) / elapsed.Seconds()), (reads1 - reads0) / elapsed.Seconds(), nil
	}
	fewCPU, fewReads, err := idleCost(10)
	if err != nil {
		return nil, fmt.Errorf("idle streams: %w", err)
	}
	manyCPU, manyReads, err := idleCost(o.idleStreams)
	if err != nil {
		return nil, fmt.Errorf("idle streams: %w", err)
	}
	rows = append(rows, row{
		measure: fmt.Sprintf("Events: %d idle streams open on the replica, nothing happening", o.idleStreams),
		subject: fmt.Sprintf("CPU %s per second; %.1f reads of the log per second (10 idle streams: CPU %s/s, %.1f reads/s)",
			manyCPU.Round(time.Microsecond), manyReads, fewCPU.Round(time.Microsecond), fewReads),
		value:  fmt.Sprintf("**%.1f** reads/s", manyReads),
		target: "reads do not grow with the streams", hasGoal: true, met: manyReads <= fewReads*1.5+1, id: "events",
	})

	// Latency, with the idle streams open and one active stream.
	closeAll, err := idle(o.idleStreams)
	if err != nil {
		return nil, err
	}
	defer closeAll()
	active, err := openStream(ctx, streamClient, s.convURL+"/v1/events/stream?types=message.created", clientBearer, -1)
	if err != nil {
		return nil, err
	}
	defer active.Close()
	var mu sync.Mutex
	arrived := map[string]time.Time{}
	got := make(chan struct{}, 1)
	go func() {
		_ = readStream(active, func(e feedEvent) {
			if e.Data.Message == nil {
				return
			}
			mu.Lock()
			arrived[e.Data.Message.ID] = time.Now()
			mu.Unlock()
			select {
			case got <- struct{}{}:
			default:
			}
		})
	}()
	pos, err := feedEnd(ctx, client, s.convURL, clientBearer)
	if err != nil {
		return nil, err
	}
	var toFeed, toStream []time.Duration
	for range o.changes {
		start := time.Now()
		status, body, err := postWithBearer(ctx, client, userBearer, s.convURL+messagesPath(conv), []byte(`{"body":"latency"}`))
		if err != nil || status != http.StatusCreated {
			return nil, fmt.Errorf("post message: %d %s %v", status, body, err)
		}
		var m struct {
			ID string `json:"id"`
		}
		_ = json.Unmarshal(body, &m)
		for seen := false; !seen; {
			page, next, err := readFeed(ctx, client, s.convURL, clientBearer, pos, 1000)
			if err != nil {
				return nil, err
			}
			pos = next
			seen = slices.ContainsFunc(page, func(e feedEvent) bool { return e.Data.Message != nil && e.Data.Message.ID == m.ID })
			if seen {
				toFeed = append(toFeed, time.Since(start))
			} else {
				time.Sleep(time.Millisecond)
			}
		}
		for {
			mu.Lock()
			at, ok := arrived[m.ID]
			mu.Unlock()
			if ok {
				toStream = append(toStream, at.Sub(start))
				break
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-got:
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	p := func(d []time.Duration, q float64) time.Duration {
		slices.Sort(d)
		return d[min(len(d)-1, int(q*float64(len(d))))]
	}
	for _, r := range []struct {
		what string
		d    []time.Duration
	}{{"the feed (polled every millisecond)", toFeed}, {"an open stream", toStream}} {
		p99 := p(r.d, 0.99)
		rows = append(rows, row{
			measure: fmt.Sprintf("Events: a message posted → its event in %s, %d changes one after another, %d idle streams open", r.what, o.changes, o.idleStreams),
			subject: fmt.Sprintf("p50 %s, p99 %s (from the start of the POST)", p(r.d, 0.5).Round(100*time.Microsecond), p99.Round(100*time.Microsecond)),
			value:   fmt.Sprintf("**%d ms** p99", p99.Milliseconds()),
			target:  "p99 ≤ 1 s", hasGoal: true, met: p99 <= time.Second, id: "events",
		})
	}
	return rows, nil
}

// metric reads one counter of the conversations process's /metrics.
func (s *stack) metric(ctx context.Context, name string) (float64, error) {
	status, _, body, err := get(ctx, http.DefaultClient, "http://"+s.convOps+"/metrics", "")
	if err != nil || status != http.StatusOK {
		return 0, fmt.Errorf("GET /metrics: %d %v", status, err)
	}
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("/metrics has no %s", name)
}

// readFeed reads one page of the feed after after.
func readFeed(ctx context.Context, client *http.Client, base, bearer string, after int64, limit int) ([]feedEvent, int64, error) {
	u := fmt.Sprintf("%s/v1/events?after=%d&limit=%d", base, after, limit)
	status, h, body, err := get(ctx, client, u, bearer)
	if err != nil {
		return nil, 0, err
	}
	var page []feedEvent
	if status != http.StatusOK || json.Unmarshal(body, &page) != nil {
		return nil, 0, fmt.Errorf("GET %s answered %d: %.200s", u, status, body)
	}
	var next int64
	if _, err := fmt.Sscanf(h.Get("Link"), "</v1/events?after=%d", &next); err != nil {
		return nil, 0, fmt.Errorf("GET %s: Link %q", u, h.Get("Link"))
	}
	return page, next, nil
}

// feedEnd is the position after the newest event.
func feedEnd(ctx context.Context, client *http.Client, base, bearer string) (int64, error) {
	var pos int64
	for {
		page, next, err := readFeed(ctx, client, base, bearer, pos, 1000)
		if err != nil {
			return 0, err
		}
		pos = next
		if len(page) < 1000 {
			return pos, nil
		}
	}
}

// openStream opens GET url (a stream of events) and returns its body once
// the service has answered 200.
func openStream(ctx context.Context, client *http.Client, u, bearer string, lastEventID int64) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+bearer)
	if lastEventID >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(lastEventID, 10))
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return nil, fmt.Errorf("GET %s answered %d: %s", u, resp.StatusCode, b)
	}
	return resp.Body, nil
}

// readStream calls handle with each event of a stream until it ends.
func readStream(body io.Reader, handle func(feedEvent)) error {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var e feedEvent
			if err := json.Unmarshal([]byte(data), &e); err != nil {
				return err
			}
			handle(e)
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// settled waits (at most two minutes) until the conversations service's
// counter name moves by no more than idleReads in a second: what opening
// streams caused is over, only the shared poll goes on.
func (s *stack) settled(ctx context.Context, name string) error {
	last := -1.0
	for range 120 {
		v, err := s.metric(ctx, name)
		if err != nil {
			return err
		}
		if last >= 0 && v-last <= idleReads {
			return nil
		}
		last = v
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("%s still moving after two minutes", name)
}

// idleReads is twice the reads a second of the hub's shared poll at the
// default interval (200 ms), with every stream at the head.
const idleReads = 10
