package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/services/conversations/mongostore"
)

// listingRows measures GET /v1/conversations (first page of 10) against
// the same find through the driver, and the 50th page against the first,
// all three alternating in one run. Before that, while the caller has
// only a page and one conversation, it measures the CPU per page of the
// conversations process against the driver's.
func listingRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	client := loopbackClient(o.workers)
	bearer, err := s.login(ctx, client, 0)
	if err != nil {
		return nil, err
	}
	claims, err := jwtClaims(bearer)
	if err != nil {
		return nil, err
	}
	accountID, _ := claims["account_id"].(string)
	userID, _ := claims["sub"].(string)

	list := func(url string) func(context.Context, int) error {
		return func(ctx context.Context, _ int) error {
			status, _, body, err := get(ctx, client, url, bearer)
			if err != nil {
				return err
			}
			if status != http.StatusOK || len(body) < 100 {
				return fmt.Errorf("GET %s answered %d: %s", url, status, body)
			}
			return nil
		}
	}
	// The service's query for a first page of 10 (services/conversations/mongostore):
	// one more than the page tells whether a next page exists.
	coll := s.client.Database(s.convDB).Collection("conversations")
	filter := bson.D{{Key: "account_id", Value: accountID}, {Key: "participants", Value: userID}}
	findOpts := options.Find().
		SetSort(bson.D{{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(11).
		SetHint("by_participant")
	driverFind := func(ctx context.Context, _ int) error {
		_, err := findPage[mongostore.ConversationDocument](ctx, coll, filter, findOpts)
		return err
	}

	cpuRow, err := s.listingCPURow(ctx, client, bearer, list(s.convURL+"/v1/conversations"), driverFind)
	if err != nil {
		return nil, err
	}
	if err := s.seedConversations(ctx, client, bearer, o.conversations); err != nil {
		return nil, err
	}
	deepURL, deepStart, err := s.pageURL(ctx, client, bearer, o.depth)
	if err != nil {
		return nil, err
	}

	sides := []side{
		{name: "GET /v1/conversations", workers: o.workers, op: list(s.convURL + "/v1/conversations")},
		{name: "driver find", workers: o.workers, op: driverFind, commands: s.driverCmds.read},
		{name: fmt.Sprintf("GET page %d", o.depth), workers: o.workers, op: list(deepURL)},
	}
	samples, err := alternate(ctx, o.rounds, o.serviceRun, sides...)
	if err != nil {
		return nil, fmt.Errorf("listing: %w", err)
	}
	if err := s.profile(ctx, s.conv, sides[0], "listing"); err != nil {
		return nil, err
	}
	api, driver, deep := samples[0], samples[1], samples[2]
	peak := s.conv.PeakRSS() // before quietCount starts another process
	counted, err := s.quietCount(ctx, sides[0], sides[2])
	if err != nil {
		return nil, err
	}
	// The CPU row's page is the same query as the first page here.
	cpuRow.cmds = cmdsOf(counted[:1]) + " / " + cpuRow.cmds
	depthNote := "The store reports no execution statistics (explain), so what each page reads is not shown."
	k1, d1, ok1 := examined(ctx, coll, filter)
	kN, dN, okN := examined(ctx, coll, keysetFilter(filter, deepStart))
	if ok1 && okN {
		depthNote = fmt.Sprintf("explain (executionStats): page 1 examined %d index keys and %d documents, page %d examined %d keys and %d documents.",
			k1, d1, o.depth, kN, dN)
	}
	vsDriver := ratios(api, driver, throughputRatio)
	// The cost of a page is the inverse of its throughput.
	depth := ratios(api, deep, throughputRatio)
	perSecond := func(s []sample) string { return thousands(medianOf(s, sample.perSecond)) + "/s" }
	return []row{
		{
			measure: fmt.Sprintf("Listing: GET /v1/conversations vs driver find, 10 of %d, %d concurrent", o.conversations, o.workers),
			subject: fmt.Sprintf("%s pages; peak RSS of the conversations process %.0f MiB", perSecond(api), peak),
			against: perSecond(driver) + " finds (same filter, sort, limit 11, hint)",
			ratio:   vsDriver, unit: "× driver", target: "≥ 0.90", hasGoal: true, met: vsDriver.median >= 0.90, id: "listing",
			cmds: cmdsCell(counted[:1], driver),
		},
		{
			measure: fmt.Sprintf("Listing: cost of page %d vs page 1 (keyset paging)", o.depth),
			subject: fmt.Sprintf("%s pages at page %d", perSecond(deep), o.depth), against: perSecond(api) + " pages at page 1",
			ratio: depth, unit: "× page 1", target: "≤ 1.10", hasGoal: true, met: depth.median <= 1.10, id: "listing",
			cmds:  cmdsCell(counted[1:], counted[:1]),
			notes: depthNote,
		},
		cpuRow,
	}, nil
}

// listingCPURow measures the CPU time the conversations process spends
// per first page, against the harness's per driver find of the same page.
// It runs on a collection of one page and one conversation: the service's
// work per page does not depend on the collection (the store's does, in
// the store's process), and a fast store gives enough pages per round for
// CPU times counted in ticks of 10 ms.
func (s *stack) listingCPURow(ctx context.Context, client *http.Client, bearer string, list, driverFind func(context.Context, int) error) (row, error) {
	const conversations = 11
	if err := s.seedConversations(ctx, client, bearer, conversations); err != nil {
		return row{}, err
	}
	samples, err := alternate(ctx, s.o.rounds, s.o.serviceRun,
		side{name: "GET /v1/conversations", workers: s.o.workers, op: list, cpu: s.conv.CPUTime},
		side{name: "driver find", workers: s.o.workers, op: driverFind, cpu: selfCPU, commands: s.driverCmds.read})
	if err != nil {
		return row{}, fmt.Errorf("listing CPU: %w", err)
	}
	api, driver := samples[0], samples[1]
	cpu := func(s []sample) string {
		return fmt.Sprintf("%.2f ms CPU each", medianOf(s, func(s sample) float64 { return ms(s.cpuPerOp()) }))
	}
	return row{
		measure: fmt.Sprintf("Listing: GET /v1/conversations, CPU per page of the conversations process vs per driver find, 10 of %d, %d concurrent", conversations, s.o.workers),
		subject: fmt.Sprintf("%s (%s pages/s; the store's and the load generator's CPU not counted)", cpu(api), thousands(medianOf(api, sample.perSecond))),
		against: cpu(driver) + " of the harness (the client side of the same find: encode, decode into structs)",
		ratio:   ratios(api, driver, cpuEfficiencyRatio), unit: "× driver", id: "listing",
		cmds: cmdsOf(driver), // listingRows puts the service's count before it
	}, nil
}

// login returns an access token of bench user i.
func (s *stack) login(ctx context.Context, client *http.Client, i int) (string, error) {
	name, password := benchUser(i)
	body, _ := json.Marshal(map[string]string{"username": name, "password": password, "accountName": benchAccount})
	status, resp, err := post(ctx, client, s.accountURL+"/login", string(body))
	if err != nil {
		return "", err
	}
	var set tokenSet
	if status != http.StatusOK || json.Unmarshal(resp, &set) != nil {
		return "", fmt.Errorf("login answered %d: %s", status, resp)
	}
	return set.Tokens.AccessToken, nil
}

// seedConversations creates conversations of the caller through the API
// until the bench has created total of them.
func (s *stack) seedConversations(ctx context.Context, client *http.Client, bearer string, total int) error {
	var next atomic.Int64
	next.Store(int64(s.seeded))
	var wg sync.WaitGroup
	errs := make([]error, s.o.workers)
	for w := range s.o.workers {
		wg.Go(func() {
			for {
				i := next.Add(1)
				if i > int64(total) {
					return
				}
				if _, err := s.createConversation(ctx, client, bearer, fmt.Sprintf("Bench conversation %d", i)); err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	s.seeded = max(s.seeded, total)
	return errors.Join(errs...)
}

var nextLink = regexp.MustCompile(`<([^>]+)>;\s*rel="next"`)

// pageURL follows the next links from the first page to page n and
// returns its URL, with the position (updatedAt, id) of the last item of
// page n-1, where page n starts.
func (s *stack) pageURL(ctx context.Context, client *http.Client, bearer string, n int) (string, position, error) {
	url := s.convURL + "/v1/conversations"
	var last position
	for page := 1; page < n; page++ {
		status, header, body, err := get(ctx, client, url, bearer)
		if err != nil {
			return "", last, err
		}
		m := nextLink.FindStringSubmatch(header.Get("Link"))
		if status != http.StatusOK || m == nil {
			return "", last, fmt.Errorf("page %d: %d, Link %q: %s", page, status, header.Get("Link"), body)
		}
		var items []position
		if err := json.Unmarshal(body, &items); err != nil || len(items) == 0 {
			return "", last, fmt.Errorf("page %d: %v: %s", page, err, body)
		}
		last = items[len(items)-1]
		url = s.convURL + m[1]
	}
	return url, last, nil
}

// position is where a page starts: the keyset of the item before it.
type position struct {
	ID        string    `json:"id"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// examined asks the store to explain a find and returns the index keys
// and documents it examined; ok is false when the store reports no
// execution statistics (the embedded one does not).
func examined(ctx context.Context, coll *mongo.Collection, filter bson.D) (keys, docs int64, ok bool) {
	cmd := bson.D{
		{Key: "explain", Value: bson.D{
			{Key: "find", Value: coll.Name()},
			{Key: "filter", Value: filter},
			{Key: "sort", Value: bson.D{{Key: "updated_at", Value: -1}, {Key: "_id", Value: -1}}},
			{Key: "limit", Value: 11},
			{Key: "hint", Value: "by_participant"},
		}},
		{Key: "verbosity", Value: "executionStats"},
	}
	var out struct {
		ExecutionStats *struct {
			TotalKeysExamined int64 `bson:"totalKeysExamined"`
			TotalDocsExamined int64 `bson:"totalDocsExamined"`
		} `bson:"executionStats"`
	}
	if err := coll.Database().RunCommand(ctx, cmd).Decode(&out); err != nil || out.ExecutionStats == nil {
		return 0, 0, false
	}
	return out.ExecutionStats.TotalKeysExamined, out.ExecutionStats.TotalDocsExamined, true
}

// keysetFilter is the store's filter for the page after pos.
func keysetFilter(first bson.D, pos position) bson.D {
	return append(append(bson.D{}, first...), bson.E{Key: "$or", Value: bson.A{
		bson.D{{Key: "updated_at", Value: bson.D{{Key: "$lt", Value: pos.UpdatedAt}}}},
		bson.D{{Key: "updated_at", Value: pos.UpdatedAt}, {Key: "_id", Value: bson.D{{Key: "$lt", Value: pos.ID}}}},
	}})
}

// findPage finds one page as the services ask for it, a page of 10 and
// one more to tell whether another follows, and decodes it into T; a page
// of another length is an error.
func findPage[T any](ctx context.Context, coll *mongo.Collection, filter any, opts *options.FindOptionsBuilder) ([]T, error) {
	cur, err := coll.Find(ctx, filter, opts)
	if err != nil {
		return nil, err
	}
	var docs []T
	if err := cur.All(ctx, &docs); err != nil {
		return nil, err
	}
	if len(docs) != 11 {
		return nil, fmt.Errorf("driver find returned %d documents, want 11", len(docs))
	}
	return docs, nil
}
