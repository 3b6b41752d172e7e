package embeddedmongo

// The proxy (package wireproxy) in front of FerretDB, through the real
// driver; its framing rules are tested against a scripted backend there.

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.mongodb.org/mongo-driver/v2/mongo/writeconcern"
)

// opMsgMoreToCome is the moreToCome bit of OP_MSG's flagBits.
const opMsgMoreToCome = 1 << 1

// pingMessage returns a whole OP_MSG {ping: 1, $db: admin} with flagBits
// flags (https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/).
func pingMessage(t *testing.T, flags uint32) []byte {
	t.Helper()
	doc, err := bson.Marshal(bson.D{{Key: "ping", Value: 1}, {Key: "$db", Value: "admin"}})
	if err != nil {
		t.Fatal(err)
	}
	body := append(binary.LittleEndian.AppendUint32(nil, flags), 0) // section kind 0: body
	body = append(body, doc...)
	m := binary.LittleEndian.AppendUint32(nil, uint32(16+len(body))) // messageLength
	m = binary.LittleEndian.AppendUint32(m, 42)                      // requestID
	m = binary.LittleEndian.AppendUint32(m, 0)                       // responseTo
	m = binary.LittleEndian.AppendUint32(m, 2013)                    // opCode OP_MSG
	return append(m, body...)
}

// readReply reads one whole message from c and returns its body document,
// assuming an OP_MSG reply.
func readReply(c net.Conn) (bson.Raw, error) {
	r := bufio.NewReader(c)
	var header [16]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(header[:4])
	if n < 21 || n > 48<<20 {
		return nil, fmt.Errorf("message length %d", n)
	}
	rest := make([]byte, n-16)
	if _, err := io.ReadFull(r, rest); err != nil {
		return nil, err
	}
	return bson.Raw(rest[5:]), nil // after flagBits and the section kind
}

// startServer starts a real server for the tests below.
func startServer(t testing.TB) *Server {
	t.Helper()
	s, err := Start(context.Background(), Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.Stop(ctx); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return s
}

func connectURI(t testing.TB, uri string, opts ...*options.ClientOptions) *mongo.Client {
	t.Helper()
	c, err := mongo.Connect(append([]*options.ClientOptions{options.Client().ApplyURI(uri).SetServerSelectionTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(func() { _ = c.Disconnect(context.Background()) })
	return c
}

// setHangDeadline gives c a deadline that only keeps a broken test from
// hanging: shortly before the test binary's own -timeout, never a fixed
// time from now, which a loaded machine can exceed.
func setHangDeadline(t *testing.T, c net.Conn) {
	if d, ok := t.Deadline(); ok {
		_ = c.SetDeadline(d.Add(-5 * time.Second))
	}
}

// TestFerretDBRepliesToMoreToCome pins down why the proxy clears
// moreToCome: FerretDB v1.24 answers such requests anyway. If this fails,
// FerretDB has learnt the flag; the proxy still works (it clears the bit).
func TestFerretDBRepliesToMoreToCome(t *testing.T) {
	s := startServer(t)
	c, err := net.Dial("tcp", s.backendAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	setHangDeadline(t, c)
	if _, err := c.Write(pingMessage(t, opMsgMoreToCome)); err != nil {
		t.Fatal(err)
	}
	reply, err := readReply(c)
	if err != nil {
		t.Fatalf("FerretDB sent no reply to a moreToCome request (%v): it honours the flag now; update the comment in wireproxy/proxy.go", err)
	}
	t.Logf("FerretDB replied to a moreToCome request: %v", reply)
}

// TestUnacknowledgedWrites: the driver sends w:0 writes with moreToCome;
// through the proxy they take effect and later commands on the same
// connection get their own replies.
func TestUnacknowledgedWrites(t *testing.T) {
	ctx := t.Context()
	s := startServer(t)
	c := connectURI(t, s.URI(), options.Client().SetMaxPoolSize(1))
	coll := c.Database("w0").Collection("docs")
	w0 := c.Database("w0").Collection("docs", options.Collection().SetWriteConcern(writeconcern.Unacknowledged()))
	for i := range 20 {
		if _, err := w0.InsertOne(ctx, bson.D{{Key: "_id", Value: i}}); err != nil {
			t.Fatalf("unacknowledged InsertOne: %v", err)
		}
		n, err := coll.CountDocuments(ctx, bson.D{})
		if err != nil {
			t.Fatalf("CountDocuments after %d unacknowledged inserts: %v", i+1, err)
		}
		if n != int64(i+1) {
			t.Fatalf("CountDocuments = %d after %d unacknowledged inserts", n, i+1)
		}
	}
	// A failing unacknowledged write (duplicate _id) reports nothing.
	if _, err := w0.InsertOne(ctx, bson.D{{Key: "_id", Value: 0}}); err != nil {
		t.Errorf("unacknowledged duplicate InsertOne: %v", err)
	}
	if err := c.Ping(ctx, nil); err != nil {
		t.Errorf("Ping after a failed unacknowledged write: %v", err)
	}
}

// TestStopHonoursContext: with a connection open to FerretDB itself, which
// the proxy cannot close, FerretDB waits up to 3s for it; Stop returns when
// its context ends.
func TestStopHonoursContext(t *testing.T) {
	s := startServer(t)
	c, err := net.Dial("tcp", s.backendAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	setHangDeadline(t, c)
	if _, err := c.Write(pingMessage(t, 0)); err != nil {
		t.Fatal(err)
	}
	if _, err := readReply(c); err != nil {
		t.Fatalf("ping FerretDB directly: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel()
	err = s.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop with a 10ms deadline and a direct connection = %v, want context.DeadlineExceeded", err)
	}
	// The cleanup registered by startServer waits for real.
}

// The benchmarks compare a command through the proxy with the same command
// sent to FerretDB's own listener, sequentially and from parallel
// goroutines (GOMAXPROCS × -cpu goroutines, sharing one client):
//
//	go test -run '^$' -bench . -benchtime 2s ./embeddedmongo/

// benchID returns the _id of the i-th (modulo 100) benchmark document. It
// is a string: FerretDB looks up string and ObjectID _ids in its index, and
// scans the collection for any other type.
func benchID(i int64) string { return fmt.Sprint("doc", i%100) }

func benchClients(b *testing.B) map[string]*mongo.Collection {
	s := startServer(b)
	colls := map[string]*mongo.Collection{
		"proxy":  connectURI(b, s.URI()).Database("bench").Collection("docs"),
		"direct": connectURI(b, "mongodb://"+s.backendAddr+"/").Database("bench").Collection("docs"),
	}
	var docs []any
	for i := range 100 {
		docs = append(docs, bson.D{{Key: "_id", Value: benchID(int64(i))}, {Key: "n", Value: 0}})
	}
	if _, err := colls["proxy"].InsertMany(context.Background(), docs); err != nil {
		b.Fatalf("InsertMany: %v", err)
	}
	return colls
}

// BenchmarkPing measures the proxy's own cost: ping is about the cheapest
// command FerretDB has.
func BenchmarkPing(b *testing.B) {
	colls := benchClients(b)
	for _, via := range []string{"direct", "proxy"} {
		b.Run(via, func(b *testing.B) {
			db := colls[via].Database()
			for b.Loop() {
				if err := db.RunCommand(context.Background(), bson.D{{Key: "ping", Value: 1}}).Err(); err != nil {
					b.Fatalf("ping: %v", err)
				}
			}
		})
	}
}

func BenchmarkFindOneByID(b *testing.B) {
	colls := benchClients(b)
	for _, via := range []string{"direct", "proxy"} {
		b.Run(via, func(b *testing.B) {
			coll := colls[via]
			i := 0
			for b.Loop() {
				var doc bson.Raw
				if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: benchID(int64(i))}}).Decode(&doc); err != nil {
					b.Fatalf("FindOne: %v", err)
				}
				i++
			}
		})
	}
}

func BenchmarkFindOneByIDParallel(b *testing.B) {
	colls := benchClients(b)
	for _, via := range []string{"direct", "proxy"} {
		b.Run(via, func(b *testing.B) {
			coll := colls[via]
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					var doc bson.Raw
					if err := coll.FindOne(context.Background(), bson.D{{Key: "_id", Value: benchID(next.Add(1))}}).Decode(&doc); err != nil {
						b.Errorf("FindOne: %v", err)
						return
					}
				}
			})
		})
	}
}

func BenchmarkInc(b *testing.B) {
	colls := benchClients(b)
	for _, via := range []string{"direct", "proxy"} {
		b.Run(via, func(b *testing.B) {
			coll := colls[via]
			i := 0
			for b.Loop() {
				_, err := coll.UpdateOne(context.Background(),
					bson.D{{Key: "_id", Value: benchID(int64(i))}},
					bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
				if err != nil {
					b.Fatalf("UpdateOne: %v", err)
				}
				i++
			}
		})
	}
}

func BenchmarkIncParallel(b *testing.B) {
	colls := benchClients(b)
	for _, via := range []string{"direct", "proxy"} {
		b.Run(via, func(b *testing.B) {
			coll := colls[via]
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, err := coll.UpdateOne(context.Background(),
						bson.D{{Key: "_id", Value: benchID(next.Add(1))}},
						bson.D{{Key: "$inc", Value: bson.D{{Key: "n", Value: 1}}}})
					if err != nil {
						b.Errorf("UpdateOne: %v", err)
						return
					}
				}
			})
		})
	}
}
