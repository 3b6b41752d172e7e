package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
)

// benchMessageBody is the body of every message the bench posts.
const benchMessageBody = "Bench message: a short line of chat, as most messages are."

// messagesRows measures the messages of a conversation: a page of them
// (GET /v1/conversations/{id}/messages) against the same reads through
// the driver, and a post (POST …/messages, no Idempotency-Key) against the
// same writes through the driver. The listing goes first, on the seeded
// messages, before the posts add to the collection. It runs before the
// conversations listing: on the embedded store every read or update of
// one conversation reads the whole collection, and the listing's 1,000
// conversations would make a post cost a scan of them.
func messagesRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	client := loopbackClient(o.workers)
	// Another user than the listing's, so that its count of
	// conversations stays what that measure says.
	bearer, err := s.login(ctx, client, 1%o.workers)
	if err != nil {
		return nil, err
	}
	claims, err := jwtClaims(bearer)
	if err != nil {
		return nil, err
	}
	who := conversations.Caller{}
	who.AccountID, _ = claims["account_id"].(string)
	who.ID, _ = claims["sub"].(string)
	listed, err := s.createConversation(ctx, client, bearer, "Bench messages")
	if err != nil {
		return nil, err
	}
	// Each posting worker posts to a conversation of its own: posts to one
	// conversation contend for its compare-and-set, which is not what the
	// ratio compares.
	posted := make([]string, o.workers)
	for w := range posted {
		if posted[w], err = s.createConversation(ctx, client, bearer, fmt.Sprintf("Bench posts %d", w)); err != nil {
			return nil, err
		}
	}
	if err := s.seedMessages(ctx, client, bearer, listed); err != nil {
		return nil, err
	}
	db := s.client.Database(s.convDB)
	convs, msgs := db.Collection("conversations"), db.Collection("messages")

	listURL := s.convURL + messagesPath(listed)
	list := func(ctx context.Context, _ int) error {
		status, _, body, err := get(ctx, client, listURL, bearer)
		if err != nil {
			return err
		}
		var page []json.RawMessage
		if status != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page) != 10 {
			return fmt.Errorf("GET %s answered %d: %s", listURL, status, body)
		}
		return nil
	}
	// The store's reads for a first page of 10 (services/conversations/mongostore,
	// ListMessages): the conversation as the caller may see it, then one
	// more message than the page, newest first, over by_conversation; and
	// the check that the conversation has recorded the newest message
	// (true here, so no write).
	msgFilter := bson.D{{Key: "account_id", Value: who.AccountID}, {Key: "conversation_id", Value: listed}}
	msgOpts := options.Find().
		SetSort(bson.D{{Key: "created_at", Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(11).
		SetHint("by_conversation")
	driverList := func(ctx context.Context, _ int) error {
		conv, err := findConversation(ctx, convs, who, listed)
		if err != nil {
			return err
		}
		docs, err := findPage[mongostore.MessageDocument](ctx, msgs, msgFilter, msgOpts)
		if err != nil {
			return err
		}
		if probe := conv; probe.RecordMessage(docs[0].CreatedAt) {
			return errors.New("the conversation has not recorded its newest message")
		}
		return nil
	}
	listSamples, err := alternate(ctx, o.rounds, o.serviceRun,
		side{name: "GET …/messages", workers: o.workers, op: list},
		side{name: "driver find", workers: o.workers, op: driverList, commands: s.driverCmds.read})
	if err != nil {
		return nil, fmt.Errorf("messages listing: %w", err)
	}

	post, driverPost := s.postSides(client, bearer, who, posted)
	postSamples, err := alternate(ctx, o.rounds, o.serviceRun,
		side{name: "POST …/messages", workers: o.workers, op: post},
		side{name: "driver writes", workers: o.workers, op: driverPost, commands: s.driverCmds.read})
	if err != nil {
		return nil, fmt.Errorf("messages posting: %w", err)
	}
	peak := s.conv.PeakRSS() // before quietCount starts another process
	counted, err := s.quietCount(ctx, side{name: "GET …/messages", workers: o.workers, op: list}, s.postSide(post))
	if err != nil {
		return nil, fmt.Errorf("messages: %w", err)
	}
	cost := counted[1]
	perPost := cost.commandsPerOp()
	costMet := perPost <= postMinimum*postTolerance

	vsWrites := ratios(postSamples[0], postSamples[1], throughputRatio)
	vsFind := ratios(listSamples[0], listSamples[1], throughputRatio)
	perSecond := func(s []sample) string { return thousands(medianOf(s, sample.perSecond)) + "/s" }
	return []row{
		{
			measure: fmt.Sprintf("Messages: POST /v1/conversations/{id}/messages vs the same writes through the driver (its event recorded with the message; the relay orders it meanwhile), %d concurrent", o.workers),
			subject: fmt.Sprintf("%s posts; peak RSS of the conversations process %.0f MiB", perSecond(postSamples[0]), peak),
			against: perSecond(postSamples[1]) + " (find the conversation, insert the message with its pending event, compare-and-set the conversation)",
			ratio:   vsWrites, unit: "× driver", id: "messages",
			cmds:   fmt.Sprintf("%.2f / %s", perPost, cmdsOf(postSamples[1])),
			target: postTarget(o.mongoURI != ""), hasGoal: true,
			met: costMet && (o.mongoURI == "" || vsWrites.median >= 0.80),
			notes: fmt.Sprintf("cmds/op of ours: %d posts, then the relay ordering their events, counted together on a quiet replica (%.0f commands); the minimum is %d (see Cost model)",
				cost.ops, cost.commands, postMinimum),
		},
		{
			measure: fmt.Sprintf("Messages: GET /v1/conversations/{id}/messages vs driver find, 10 of %d, %d concurrent", o.messages, o.workers),
			subject: perSecond(listSamples[0]) + " pages",
			against: perSecond(listSamples[1]) + " (find the conversation, then the messages: same filter, sort, limit 11, hint)",
			ratio:   vsFind, unit: "× driver", target: "≥ 0.90", hasGoal: true, met: vsFind.median >= 0.90, id: "messages",
			cmds: cmdsCell(counted[:1], listSamples[1]),
		},
	}, nil
}

// postSides are the two sides of a message-posting ratio: worker w posts
// to conversation posted[w] as bearer (who), through the service and
// through the driver's writes of the same post.
func (s *stack) postSides(client *http.Client, bearer string, who conversations.Caller, posted []string) (post, driverPost func(context.Context, int) error) {
	db := s.client.Database(s.convDB)
	convs, msgs := db.Collection("conversations"), db.Collection("messages")
	postBody, _ := json.Marshal(map[string]string{"body": benchMessageBody})
	post = func(ctx context.Context, w int) error {
		url := s.convURL + messagesPath(posted[w])
		// A 503 is retried as every client of ours does: the embedded
		// store, loaded by the bench, now and then drops a connection.
		for attempt := 1; ; attempt++ {
			status, body, err := postWithBearer(ctx, client, bearer, url, postBody)
			if err != nil {
				return err
			}
			if status == http.StatusServiceUnavailable && attempt < 3 {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			if status != http.StatusCreated {
				return fmt.Errorf("POST %s answered %d: %s", url, status, body)
			}
			return nil
		}
	}
	driverPost = func(ctx context.Context, w int) error {
		return postThroughDriver(ctx, convs, msgs, who, posted[w])
	}
	return post, driverPost
}

// postThroughDriver issues the writes of the store's PostMessage
// (services/conversations/mongostore): read the conversation as the caller may
// see it, insert the message at the conversation's next message time, and
// record it in the conversation with one compare-and-set on its version.
func postThroughDriver(ctx context.Context, convs, msgs *mongo.Collection, who conversations.Caller, conversationID string) error {
	conv, err := findConversation(ctx, convs, who, conversationID)
	if err != nil {
		return err
	}
	if conv.Status == conversations.StatusClosed {
		return fmt.Errorf("conversation %s is closed", conversationID)
	}
	m := conversations.Message{
		ID: conversations.NewMessageID(), AccountID: who.AccountID, ConversationID: conversationID, Author: who.Author(),
		Body: benchMessageBody, Metadata: json.RawMessage("{}"), CreatedAt: conv.MessageTime(time.Now()),
	}
	next := conv
	if !next.RecordMessage(m.CreatedAt) {
		return errors.New("the message did not change its conversation")
	}
	// The message carries its event, as the service's insert does: the
	// conversation after the post and the message, in the store's own
	// document.
	next.Version++
	doc, err := mongostore.NewMessageDocument(m, conversations.Event{
		ID: conversations.NewEventID(), AccountID: m.AccountID, Type: conversations.EventMessageCreated, Timestamp: m.CreatedAt,
		ConversationID: conv.ID, Audience: conv.Participants, Data: conversations.EventData{Conversation: next, Message: &m},
	})
	if err != nil {
		return err
	}
	if _, err := msgs.InsertOne(ctx, doc); err != nil {
		return err
	}
	res, err := convs.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: conv.ID}, {Key: "account_id", Value: conv.AccountID}, {Key: "version", Value: conv.Version}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "subject", Value: next.Subject},
			{Key: "status", Value: string(next.Status)},
			{Key: "participants", Value: next.Participants},
			{Key: "updated_at", Value: next.UpdatedAt},
			{Key: "last_message_at", Value: next.LastMessageAt},
			{Key: "version", Value: next.Version},
		}}})
	if err != nil {
		return err
	}
	if res.MatchedCount != 1 {
		return fmt.Errorf("conversation %s changed concurrently", conversationID)
	}
	return nil
}

// findConversation reads a conversation with the store's filter: its id,
// in the caller's account, with the caller among its participants.
func findConversation(ctx context.Context, convs *mongo.Collection, who conversations.Caller, id string) (conversations.Conversation, error) {
	var d mongostore.ConversationDocument
	err := convs.FindOne(ctx, bson.D{
		{Key: "_id", Value: id}, {Key: "account_id", Value: who.AccountID}, {Key: "participants", Value: who.ID},
	}).Decode(&d)
	if err != nil {
		return conversations.Conversation{}, fmt.Errorf("find conversation %s: %w", id, err)
	}
	return mongostore.ConversationOf(d), nil
}

func messagesPath(conversationID string) string {
	return "/v1/conversations/" + url.PathEscape(conversationID) + "/messages"
}

// createConversation creates a conversation of the caller with one peer
// through the API and returns its id.
func (s *stack) createConversation(ctx context.Context, client *http.Client, bearer, subject string) (string, error) {
	return createConversation(ctx, client, s.convURL, bearer, subject)
}

// createConversation creates a conversation through the service at base.
func createConversation(ctx context.Context, client *http.Client, base, bearer, subject string) (string, error) {
	in, _ := json.Marshal(map[string]any{"subject": subject, "participants": []string{"usr_00000000000000000000beef"}})
	status, body, err := postWithBearer(ctx, client, bearer, base+"/v1/conversations", in)
	if err != nil {
		return "", err
	}
	var created struct {
		ID string `json:"id"`
	}
	if status != http.StatusCreated || json.Unmarshal(body, &created) != nil || created.ID == "" {
		return "", fmt.Errorf("create conversation answered %d: %s", status, body)
	}
	return created.ID, nil
}

// seedMessages posts the listed conversation's messages through the API,
// several at a time as the workers would.
func (s *stack) seedMessages(ctx context.Context, client *http.Client, bearer, conversationID string) error {
	in, _ := json.Marshal(map[string]string{"body": benchMessageBody})
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, s.o.workers)
	for w := range s.o.workers {
		wg.Go(func() {
			for next.Add(1) <= int64(s.o.messages) {
				status, body, err := postWithBearer(ctx, client, bearer, s.convURL+messagesPath(conversationID), in)
				if err == nil && status != http.StatusCreated {
					err = fmt.Errorf("post message answered %d: %s", status, body)
				}
				if err != nil {
					errs[w] = err
					return
				}
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// postWithBearer posts a JSON body with the bearer.
func postWithBearer(ctx context.Context, client *http.Client, bearer, url string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	return do(client, req)
}
