package wireproxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// The proxy is tested against a scripted fake backend, which checks the
// framing rules precisely (including exhaust replies, which FerretDB never
// sends); package embeddedmongo tests it in front of FerretDB through the
// real driver.

// message builds a whole wire message.
func message(requestID, responseTo, op int32, body []byte) []byte {
	m := make([]byte, headerLen, headerLen+len(body))
	binary.LittleEndian.PutUint32(m[0:], uint32(headerLen+len(body)))
	binary.LittleEndian.PutUint32(m[4:], uint32(requestID))
	binary.LittleEndian.PutUint32(m[8:], uint32(responseTo))
	binary.LittleEndian.PutUint32(m[12:], uint32(op))
	return append(m, body...)
}

// opMsg builds an OP_MSG with one body section holding doc, and a checksum
// if flags ask for one.
func opMsg(t testing.TB, requestID, responseTo int32, flags uint32, doc any) []byte {
	t.Helper()
	raw, err := bson.Marshal(doc)
	if err != nil {
		t.Fatalf("bson.Marshal: %v", err)
	}
	body := binary.LittleEndian.AppendUint32(nil, flags)
	body = append(body, 0) // section kind 0: body
	body = append(body, raw...)
	if flags&flagChecksumPresent != 0 {
		body = append(body, 0, 0, 0, 0)
	}
	m := message(requestID, responseTo, opCodeMsg, body)
	if flags&flagChecksumPresent != 0 {
		end := len(m) - 4
		binary.LittleEndian.PutUint32(m[end:], crc32.Checksum(m[:end], castagnoli))
	}
	return m
}

// msgDoc returns the body document of m, a whole OP_MSG built by opMsg.
func msgDoc(t testing.TB, m []byte) bson.M {
	t.Helper()
	if opCode(m) != opCodeMsg {
		t.Fatalf("opCode %d, want OP_MSG", opCode(m))
	}
	var doc bson.M
	if err := bson.Unmarshal(m[headerLen+5:], &doc); err != nil {
		t.Fatalf("decoding OP_MSG body: %v", err)
	}
	return doc
}

func requestID(m []byte) int32  { return int32(binary.LittleEndian.Uint32(m[4:8])) }
func responseTo(m []byte) int32 { return int32(binary.LittleEndian.Uint32(m[8:12])) }

// startProxy starts a proxy on a free loopback port in front of a fake
// backend, which calls serve for each connection (and closes it after).
// It returns the proxy's address.
func startProxy(t *testing.T, serve func(net.Conn)) (*Proxy, string) {
	t.Helper()
	bl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("backend listen: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			c, err := bl.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				serve(c)
			})
		}
	})
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proxy listen: %v", err)
	}
	p := New(pl, bl.Addr().String())
	p.Serve()
	t.Cleanup(func() {
		select {
		case <-p.Close():
		case <-hangGuard(t):
			t.Error("proxy did not stop before the test's deadline")
		}
		_ = bl.Close()
		wg.Wait()
	})
	return p, pl.Addr().String()
}

// hangGuardMargin is how long before the test binary's -timeout the waits
// below give up: long enough to fail with a message (and run the
// cleanups) rather than with the timeout's panic.
const hangGuardMargin = 5 * time.Second

// hangDeadline is when a wait that only guards against a hang gives up:
// shortly before the test's own deadline (go test -timeout), never at a
// fixed time from now, since writing 48 MiB under -race on a loaded
// machine can take any time (zero when the test has no deadline).
func hangDeadline(t *testing.T) time.Time {
	d, ok := t.Deadline()
	if !ok {
		return time.Time{}
	}
	return d.Add(-hangGuardMargin)
}

// hangGuard fires at hangDeadline (never when the test has no deadline).
func hangGuard(t *testing.T) <-chan time.Time {
	d := hangDeadline(t)
	if d.IsZero() {
		return nil
	}
	return time.After(time.Until(d))
}

// dial connects to addr with a deadline that keeps a broken test from
// hanging.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	_ = c.SetDeadline(hangDeadline(t))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func write(t *testing.T, c net.Conn, m []byte) {
	t.Helper()
	if _, err := c.Write(m); err != nil {
		t.Fatalf("write: %v", err)
	}
}

func read(t *testing.T, c net.Conn) []byte {
	t.Helper()
	m, err := readMessage(c, nil)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	return m
}

// echoBackend answers each OP_MSG with an OP_MSG {ok: 1, echo: <the
// request's ping field>}, and each other message with an OP_REPLY-shaped message of
// the same body.
func echoBackend(t *testing.T) func(net.Conn) {
	return func(c net.Conn) {
		var id atomic.Int32
		for {
			req, err := readMessage(c, nil)
			if err != nil {
				return
			}
			var reply []byte
			if opCode(req) == opCodeMsg {
				reply = opMsg(t, id.Add(1), requestID(req), 0, bson.D{{Key: "ok", Value: 1}, {Key: "echo", Value: msgDoc(t, req)["ping"]}})
			} else {
				reply = message(id.Add(1), requestID(req), opCodeReply, req[headerLen:])
			}
			if _, err := c.Write(reply); err != nil {
				return
			}
		}
	}
}

func TestProxyForwardsOneReplyPerRequest(t *testing.T) {
	_, addr := startProxy(t, echoBackend(t))
	c := dial(t, addr)
	for i := range int32(3) {
		write(t, c, opMsg(t, 100+i, 0, 0, bson.D{{Key: "ping", Value: i}}))
		reply := read(t, c)
		if responseTo(reply) != 100+i {
			t.Errorf("reply responseTo %d, want %d", responseTo(reply), 100+i)
		}
		if echo := msgDoc(t, reply)["echo"]; echo != i {
			t.Errorf("reply echoes ping %v, want %d", echo, i)
		}
	}

	// OP_QUERY (legacy handshake) gets one OP_REPLY; so does anything else.
	for _, op := range []int32{opCodeQuery, opCodeCompressed} {
		write(t, c, message(7, 0, op, []byte("some body")))
		reply := read(t, c)
		if opCode(reply) != opCodeReply || responseTo(reply) != 7 || string(reply[headerLen:]) != "some body" {
			t.Errorf("opCode %d: got reply %q", op, reply)
		}
	}
}

// TestProxyOneWayRequest: a request with moreToCome gets no reply. The
// backend receives it without the bit (and with a valid checksum), because
// FerretDB replies regardless, and the proxy drops the reply.
func TestProxyOneWayRequest(t *testing.T) {
	var mu sync.Mutex
	var got []uint32
	_, addr := startProxy(t, func(c net.Conn) {
		for {
			req, err := readMessage(c, nil)
			if err != nil {
				return
			}
			flags := msgFlags(req)
			if flags&flagChecksumPresent != 0 {
				end := len(req) - 4
				if want := crc32.Checksum(req[:end], castagnoli); binary.LittleEndian.Uint32(req[end:]) != want {
					t.Errorf("request %d reached the backend with a bad checksum", requestID(req))
				}
			}
			mu.Lock()
			got = append(got, flags)
			mu.Unlock()
			if _, err := c.Write(opMsg(t, 1, requestID(req), 0, bson.D{{Key: "ok", Value: 1}})); err != nil {
				return
			}
		}
	})
	c := dial(t, addr)
	write(t, c, opMsg(t, 1, 0, flagMoreToCome, bson.D{{Key: "insert", Value: "a"}}))
	write(t, c, opMsg(t, 2, 0, flagMoreToCome|flagChecksumPresent, bson.D{{Key: "insert", Value: "b"}}))
	write(t, c, opMsg(t, 3, 0, 0, bson.D{{Key: "find", Value: "c"}}))
	if reply := read(t, c); responseTo(reply) != 3 {
		t.Errorf("first reply answers request %d, want 3 (the one-way requests get none)", responseTo(reply))
	}
	mu.Lock()
	defer mu.Unlock()
	if want := []uint32{0, flagChecksumPresent, 0}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("backend saw flags %v, want %v", got, want)
	}
}

// TestProxyExhaustReplies: replies with moreToCome are followed by more,
// all forwarded; the lock covers only the first, so other connections get
// through while a stream (e.g. a streaming hello) is open.
func TestProxyExhaustReplies(t *testing.T) {
	resume := make(chan struct{})
	_, addr := startProxy(t, func(c net.Conn) {
		for {
			req, err := readMessage(c, nil)
			if err != nil {
				return
			}
			if msgDoc(t, req)["stream"] == nil {
				if _, err := c.Write(opMsg(t, 1, requestID(req), 0, bson.D{{Key: "ok", Value: 1}})); err != nil {
					return
				}
				continue
			}
			for i := range int32(3) {
				if i == 1 {
					select {
					case <-resume:
					case <-hangGuard(t):
						return
					}
				}
				flags := uint32(flagMoreToCome)
				if i == 2 {
					flags = 0
				}
				if _, err := c.Write(opMsg(t, 10+i, requestID(req), flags, bson.D{{Key: "n", Value: i}})); err != nil {
					return
				}
			}
		}
	})

	streaming := dial(t, addr)
	write(t, streaming, opMsg(t, 1, 0, 1<<16 /* exhaustAllowed */, bson.D{{Key: "stream", Value: true}}))
	if n := msgDoc(t, read(t, streaming))["n"]; n != int32(0) {
		t.Fatalf("first streamed reply n = %v, want 0", n)
	}

	// The stream is open and paused; another connection is served.
	other := dial(t, addr)
	write(t, other, opMsg(t, 5, 0, 0, bson.D{{Key: "ping", Value: 1}}))
	if reply := read(t, other); responseTo(reply) != 5 {
		t.Errorf("other connection: reply to %d, want 5", responseTo(reply))
	}

	close(resume)
	for i := int32(1); i < 3; i++ {
		if n := msgDoc(t, read(t, streaming))["n"]; n != i {
			t.Fatalf("streamed reply n = %v, want %d", n, i)
		}
	}
	// The stream has ended: the connection takes requests again.
	write(t, streaming, opMsg(t, 2, 0, 0, bson.D{{Key: "ping", Value: 1}}))
	if reply := read(t, streaming); responseTo(reply) != 2 {
		t.Errorf("after the stream: reply to %d, want 2", responseTo(reply))
	}
}

// TestProxyRejectsBadLengths: a messageLength beyond 48 MiB + header, or too
// short to be a message, closes the connection; nothing reaches the backend.
func TestProxyRejectsBadLengths(t *testing.T) {
	var reached atomic.Int32
	_, addr := startProxy(t, func(c net.Conn) {
		if _, err := readMessage(c, nil); err == nil {
			reached.Add(1)
		}
	})
	for _, n := range []int{maxMessageLen + 1, 1 << 30, -1, 0, headerLen, headerLen + 3} {
		c := dial(t, addr)
		header := binary.LittleEndian.AppendUint32(nil, uint32(n))
		header = binary.LittleEndian.AppendUint32(header, 1)
		header = binary.LittleEndian.AppendUint32(header, 0)
		header = binary.LittleEndian.AppendUint32(header, opCodeMsg)
		write(t, c, header)
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
			t.Errorf("length %d: read after header = %v, want EOF (connection closed)", n, err)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("%d bad messages reached the backend", n)
	}

	// The largest allowed message goes through.
	_, addr = startProxy(t, func(c net.Conn) {
		req, err := readMessage(c, nil)
		if err != nil {
			t.Errorf("backend: reading the largest message: %v", err)
			return
		}
		_, _ = c.Write(message(1, requestID(req), opCodeReply, binary.LittleEndian.AppendUint32(nil, uint32(len(req)))))
	})
	c := dial(t, addr)
	write(t, c, message(9, 0, opCodeQuery, make([]byte, maxMessageLen-headerLen)))
	reply := read(t, c)
	if n := binary.LittleEndian.Uint32(reply[headerLen:]); n != maxMessageLen || responseTo(reply) != 9 {
		t.Errorf("largest message: backend got %d bytes, reply to %d; want %d bytes, reply to 9", n, responseTo(reply), maxMessageLen)
	}
}

// TestProxySerialises: however many clients send at once, the backend
// never has two requests in progress.
func TestProxySerialises(t *testing.T) {
	var inFlight, most atomic.Int32
	_, addr := startProxy(t, func(c net.Conn) {
		for {
			req, err := readMessage(c, nil)
			if err != nil {
				return
			}
			n := inFlight.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			time.Sleep(200 * time.Microsecond)
			inFlight.Add(-1)
			if _, err := c.Write(opMsg(t, 1, requestID(req), 0, bson.D{{Key: "ok", Value: 1}})); err != nil {
				return
			}
		}
	})
	const clients, each = 8, 25
	var wg sync.WaitGroup
	for range clients {
		c := dial(t, addr)
		wg.Go(func() {
			for i := range int32(each) {
				if _, err := c.Write(opMsg(t, i, 0, 0, bson.D{{Key: "ping", Value: 1}})); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				if _, err := readMessage(c, nil); err != nil {
					t.Errorf("read: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if m := most.Load(); m != 1 {
		t.Errorf("backend had up to %d requests in progress at once, want 1", m)
	}
}

// TestProxyClosesBothSides: a client hanging up closes its backend
// connection, and closing the proxy closes client connections.
func TestProxyClosesBothSides(t *testing.T) {
	backendClosed := make(chan struct{}, 1)
	p, addr := startProxy(t, func(c net.Conn) {
		echoBackend(t)(c)
		backendClosed <- struct{}{}
	})
	c := dial(t, addr)
	write(t, c, opMsg(t, 1, 0, 0, bson.D{{Key: "ping", Value: 1}}))
	read(t, c)
	_ = c.Close()
	select {
	case <-backendClosed:
	case <-hangGuard(t):
		t.Fatal("backend connection still open at the test's deadline after the client hung up")
	}

	c = dial(t, addr)
	write(t, c, opMsg(t, 1, 0, 0, bson.D{{Key: "ping", Value: 1}}))
	read(t, c)
	select {
	case <-p.Close():
	case <-hangGuard(t):
		t.Fatal("proxy did not stop")
	}
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Error("client connection still open after close")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Error("proxy still accepts connections after close")
	}
}

// TestProxyIdle: the proxy counts client connections (not its own ones to
// the backend) and knows since when none is open.
func TestProxyIdle(t *testing.T) {
	p, addr := startProxy(t, echoBackend(t))
	if idle, _ := p.Idle(); !idle {
		t.Error("Idle() = false before any client connected")
	}
	a, b := dial(t, addr), dial(t, addr)
	for _, c := range []net.Conn{a, b} {
		write(t, c, opMsg(t, 1, 0, 0, bson.D{{Key: "ping", Value: 1}}))
		read(t, c) // the proxy has accepted c
	}
	_ = a.Close()
	// The proxy notices a closed connection a moment later; b stays.
	waitIdle := func(want bool) time.Time {
		t.Helper()
		for deadline := hangDeadline(t); ; time.Sleep(time.Millisecond) {
			idle, since := p.Idle()
			if idle == want {
				return since
			}
			if !deadline.IsZero() && time.Now().After(deadline) {
				t.Fatalf("Idle() still %v at the test's deadline, want %v", idle, want)
			}
		}
	}
	time.Sleep(50 * time.Millisecond)
	waitIdle(false)
	closed := time.Now()
	_ = b.Close()
	if since := waitIdle(true); since.Before(closed) {
		t.Errorf("idle since %v, before the last client hung up at %v", since, closed)
	}
}
