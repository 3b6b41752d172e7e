// Package wireproxy forwards MongoDB wire-protocol connections to a backend
// server and lets one command at a time through, which makes FerretDB's
// single-document updates atomic; package embeddedmongo explains why and
// what it costs. It does not import FerretDB, so its tests run with -race
// while the embedded server's own packages are built without.
package wireproxy

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"sync"
	"time"
)

// MongoDB wire protocol constants
// (https://www.mongodb.com/docs/manual/reference/mongodb-wire-protocol/).
const (
	// headerLen is the size of the standard message header: messageLength
	// (which includes the header), requestID, responseTo, opCode; each an
	// int32, little-endian.
	headerLen = 16
	// maxMessageLen bounds what the proxy reads: 48 MiB of body (MongoDB's
	// maxMessageSizeBytes is 48,000,000) plus the header. A longer message
	// closes the connection.
	maxMessageLen = 48<<20 + headerLen

	opCodeReply      = 1
	opCodeQuery      = 2004
	opCodeCompressed = 2012
	opCodeMsg        = 2013

	// OP_MSG flagBits, the uint32 right after the header.
	flagChecksumPresent = 1 << 0
	flagMoreToCome      = 1 << 1
)

// backendDialTimeout bounds connecting to FerretDB for a new client
// connection; FerretDB listens on loopback, so this only matters if it
// hangs. Generous: in one make test on two loaded cores the proxy closed a
// client's connection mid-request ("broken pipe") just after the backend
// had accepted the proxy's, which only a failed dial does in handle; the
// bound was 10 s then.
const backendDialTimeout = time.Minute

// keepBufferCap is the largest message buffer a connection keeps between
// messages; the rare larger message gets a buffer of its own.
const keepBufferCap = 1 << 20

// castagnoli is the CRC-32C table of OP_MSG checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Proxy forwards MongoDB wire protocol connections to a backend server
// (FerretDB) and lets one command at a time through: see the package doc.
//
// Each accepted client connection gets its own backend connection and one
// goroutine, which loops: read a request from the client, lock mu, write
// the request to the backend, read the reply, write it to the client,
// unlock mu. An error on either connection closes both. (A backend
// connection that FerretDB closes while idle is noticed at the client's
// next request, which then fails as it would on a direct connection.)
//
// Since the reply is written to the client under the lock, a client that
// sends a request and then stops reading would hold up everybody once its
// reply outgrows the socket buffers; drivers read their replies at once.
type Proxy struct {
	ln      net.Listener
	backend string // FerretDB's host:port

	// mu serialises commands server-wide: it is held from the moment a
	// request has been read in full until its reply has been forwarded.
	mu sync.Mutex

	connMu sync.Mutex
	conns  map[net.Conn]struct{} // open client and backend connections
	closed bool
	// clients counts the open client connections; idleSince is when the
	// last of them closed (or the proxy's creation): see idle.
	clients   int
	idleSince time.Time

	wg   sync.WaitGroup // the accept loop and the connection goroutines
	done chan struct{}  // closed when all of wg has returned
	once sync.Once
}

// New returns a proxy from ln to backend; call Serve to start it.
func New(ln net.Listener, backend string) *Proxy {
	return &Proxy{ln: ln, backend: backend, conns: map[net.Conn]struct{}{}, idleSince: time.Now(), done: make(chan struct{})}
}

// Idle reports whether no client connection is open and, if so, since
// when: the moment the last one closed, or New.
func (p *Proxy) Idle() (bool, time.Time) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	return p.clients == 0, p.idleSince
}

// Serve starts accepting connections in the background, until Close.
func (p *Proxy) Serve() {
	p.wg.Go(p.acceptLoop)
}

func (p *Proxy) acceptLoop() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Typically out of file descriptors: wait a little, as
			// net/http does, instead of spinning or giving up.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		if !p.track(c) {
			return
		}
		p.countClient(+1)
		p.wg.Go(func() {
			defer p.countClient(-1)
			p.handle(c)
		})
	}
}

// track records c as open, so close can close it; it closes c and reports
// false if the proxy is already closed.
func (p *Proxy) track(c net.Conn) bool {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

// countClient adds delta to the number of open client connections.
func (p *Proxy) countClient(delta int) {
	p.connMu.Lock()
	defer p.connMu.Unlock()
	p.clients += delta
	if p.clients == 0 {
		p.idleSince = time.Now()
	}
}

// release closes c and forgets it.
func (p *Proxy) release(c net.Conn) {
	_ = c.Close()
	p.connMu.Lock()
	delete(p.conns, c)
	p.connMu.Unlock()
}

// Close stops accepting, closes all connections (so blocked reads and
// writes fail at once) and returns a channel closed once every goroutine of
// the proxy has returned. It may be called more than once.
func (p *Proxy) Close() <-chan struct{} {
	p.once.Do(func() {
		_ = p.ln.Close()
		p.connMu.Lock()
		p.closed = true
		for c := range p.conns {
			_ = c.Close()
		}
		p.connMu.Unlock()
		go func() {
			p.wg.Wait()
			close(p.done)
		}()
	})
	return p.done
}

// handle serves one client connection until either side closes or fails.
func (p *Proxy) handle(client net.Conn) {
	defer p.release(client)
	backend, err := net.DialTimeout("tcp", p.backend, backendDialTimeout)
	if err != nil {
		return // the client sees its connection closed
	}
	if !p.track(backend) {
		return
	}
	defer p.release(backend)

	cr := bufio.NewReader(client)
	br := bufio.NewReader(backend)
	var buf []byte
	for {
		req, err := readMessage(cr, buf)
		if err != nil {
			return
		}
		if buf, err = p.roundTrip(req, client, backend, br); err != nil {
			return
		}
		if cap(buf) > keepBufferCap {
			buf = nil
		}
	}
}

// roundTrip forwards req, a whole message from client, to backend and the
// reply or replies it calls for back to client, holding p.mu until the
// first reply has been forwarded. It returns a buffer for reuse.
func (p *Proxy) roundTrip(req []byte, client, backend net.Conn, br *bufio.Reader) ([]byte, error) {
	p.mu.Lock()
	locked := true
	defer func() {
		if locked {
			p.mu.Unlock()
		}
	}()

	// A client's OP_MSG with moreToCome expects no reply (the driver sends
	// unacknowledged writes, w:0, that way). FerretDB v1 ignores the bit
	// and replies anyway, which would leave a stray reply on the backend
	// connection for the next request to receive. So ask the backend for
	// the reply explicitly, wait for it (the write has then happened,
	// inside the lock like every other command) and drop it.
	oneWay := opCode(req) == opCodeMsg && msgFlags(req)&flagMoreToCome != 0
	if oneWay {
		clearMoreToCome(req)
	}
	if _, err := backend.Write(req); err != nil {
		return req, fmt.Errorf("writing request to backend: %w", err)
	}
	buf := req
	for {
		reply, err := readMessage(br, buf)
		if err != nil {
			return buf, fmt.Errorf("reading reply from backend: %w", err)
		}
		buf = reply
		if oneWay {
			return buf, nil
		}
		if _, err := client.Write(reply); err != nil {
			return buf, fmt.Errorf("writing reply to client: %w", err)
		}
		// An OP_MSG reply with moreToCome announces another reply
		// (exhaust: a getMore with exhaustAllowed, or the streaming
		// hello of server monitoring). Such a stream only reads, and
		// it can last for ever (streaming hello), so the lock covers
		// its first reply only. FerretDB v1 never streams: its hello
		// has no topologyVersion, so drivers poll instead. OP_QUERY
		// gets one OP_REPLY; so does anything else (OP_COMPRESSED).
		if locked {
			p.mu.Unlock()
			locked = false
		}
		if opCode(reply) != opCodeMsg || msgFlags(reply)&flagMoreToCome == 0 {
			return buf, nil
		}
	}
}

// readMessage reads one whole message from r into buf (grown if needed)
// and returns it. It fails on a messageLength outside [header+4, max]: such
// a stream cannot be resynchronised, the caller closes the connection.
func readMessage(r io.Reader, buf []byte) ([]byte, error) {
	var header [headerLen]byte
	if _, err := io.ReadFull(r, header[:]); err != nil {
		return buf, err
	}
	n := int64(int32(binary.LittleEndian.Uint32(header[:4])))
	// Every opcode has at least an int32 after the header.
	if n < headerLen+4 || n > maxMessageLen {
		return buf, fmt.Errorf("message length %d out of range [%d, %d]", n, headerLen+4, maxMessageLen)
	}
	if int64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	copy(buf, header[:])
	if _, err := io.ReadFull(r, buf[headerLen:]); err != nil {
		return buf, err
	}
	return buf, nil
}

// opCode returns the opCode of msg, a whole message.
func opCode(msg []byte) int32 {
	return int32(binary.LittleEndian.Uint32(msg[12:16]))
}

// msgFlags returns the flagBits of msg, a whole OP_MSG.
func msgFlags(msg []byte) uint32 {
	return binary.LittleEndian.Uint32(msg[headerLen : headerLen+4])
}

// clearMoreToCome clears the moreToCome bit of msg, a whole OP_MSG, and
// updates its checksum if it has one (CRC-32C of all preceding bytes).
func clearMoreToCome(msg []byte) {
	flags := msgFlags(msg) &^ flagMoreToCome
	binary.LittleEndian.PutUint32(msg[headerLen:headerLen+4], flags)
	if flags&flagChecksumPresent != 0 && len(msg) >= headerLen+4+4 {
		end := len(msg) - 4
		binary.LittleEndian.PutUint32(msg[end:], crc32.Checksum(msg[:end], castagnoli))
	}
}
