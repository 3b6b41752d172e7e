package clientstest

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// FaultProxy is the one fault-injecting proxy of the client suites: its
// control endpoint (ACME_TEST_FAULT_PROXY_URL) opens proxies in front of a
// real service, each on a listener of its own, that forward every request
// and, for the first N requests of one method on a path prefix, close the
// connection instead of returning the service's answer, as a network
// failure after the request was processed would. It fakes nothing of the
// API: every answer that reaches a client is the service's own.
//
// The control API (JSON):
//
//	POST   /proxies       {"upstream":URL,"method":"POST","pathPrefix":"/v1/conversations","drop":1}
//	                      → 201 {"id":"1","url":"http://127.0.0.1:PORT"}
//	GET    /proxies/{id}  → 200 {"dropped":1,"forwarded":[{"method","target","headers","idempotencyKey","dropped"}]}
//	DELETE /proxies/{id}  → 204, and the proxy's listener is closed
//
// upstream must be one of the URLs the FaultProxy was made for (the
// services of the run).
//
// With "cutAfterEvents":N (N > 0) the proxy streams the matching answers
// as they come instead of waiting for their end (a Server-Sent Events
// stream never ends by itself), and for the first "drop" of them closes
// the connection right after the N-th event (a block with a data line), as
// a network failure in the middle of a live stream would.
//
// With "refuseTokens":N the proxy breaks the signature of the bearer token
// of N matching requests, from the one numbered "refuseFrom" (0: the
// first), so that the service itself answers 401 invalid_token, as it
// does to a token that expired or that a key rotation left behind: no
// service can be made to refuse a token on demand. The report shows the
// headers as the client sent them, and tokenRefused.
type FaultProxy struct {
	// URL is the control endpoint, e.g. http://127.0.0.1:40123.
	URL string

	upstreams []string
	server    *http.Server
	mu        sync.Mutex
	next      int
	proxies   map[string]*dropProxy
}

// Forwarded is one request a proxy passed on, as the control API reports it.
type Forwarded struct {
	Method  string            `json:"method"`
	Target  string            `json:"target"`
	Headers map[string]string `json:"headers"`
	// IdempotencyKey is the request's Idempotency-Key header ("" if none).
	IdempotencyKey string `json:"idempotencyKey"`
	// Dropped says whether the client got the answer (false) or a closed
	// connection (true).
	Dropped bool `json:"dropped"`
	// TokenRefused says whether the proxy broke the request's bearer token
	// on its way (refuseTokens).
	TokenRefused bool `json:"tokenRefused"`
}

// faultSpec is the body of POST /proxies.
type faultSpec struct {
	Upstream   string `json:"upstream"`
	Method     string `json:"method"`
	PathPrefix string `json:"pathPrefix"`
	Drop       int    `json:"drop"`
	// CutAfterEvents > 0 streams the matching answers and cuts the first
	// Drop of them after this many events.
	CutAfterEvents int `json:"cutAfterEvents"`
	// RefuseTokens matching requests, from the one numbered RefuseFrom
	// (0: the first), reach the service with their bearer token broken.
	RefuseTokens int `json:"refuseTokens"`
	RefuseFrom   int `json:"refuseFrom"`
}

// StartFaultProxy serves the control endpoint on a loopback port, for
// proxies in front of the given upstream URLs. Close stops it and every
// proxy it opened.
func StartFaultProxy(upstreams ...string) (*FaultProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy: %w", err)
	}
	fp := &FaultProxy{URL: "http://" + ln.Addr().String(), upstreams: upstreams, proxies: map[string]*dropProxy{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /proxies", fp.open)
	mux.HandleFunc("GET /proxies/{id}", fp.report)
	mux.HandleFunc("DELETE /proxies/{id}", fp.close)
	fp.server = &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	go func() { _ = fp.server.Serve(ln) }()
	return fp, nil
}

// Close stops the control endpoint and every open proxy.
func (fp *FaultProxy) Close() error {
	err := fp.server.Close()
	fp.mu.Lock()
	defer fp.mu.Unlock()
	for id, p := range fp.proxies {
		err = errors.Join(err, p.server.Close())
		delete(fp.proxies, id)
	}
	return err
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (fp *FaultProxy) open(w http.ResponseWriter, r *http.Request) {
	var spec faultSpec
	if err := json.NewDecoder(r.Body).Decode(&spec); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusBadRequest)
		return
	}
	upstream, err := url.Parse(spec.Upstream)
	known := false
	for _, u := range fp.upstreams {
		known = known || u == strings.TrimSuffix(spec.Upstream, "/")
	}
	if err != nil || !known || spec.Method == "" || min(spec.Drop, spec.CutAfterEvents, spec.RefuseTokens, spec.RefuseFrom) < 0 {
		http.Error(w, fmt.Sprintf("want an upstream of %v, a method, and no negative count", fp.upstreams), http.StatusBadRequest)
		return
	}
	p, err := startDropProxy(upstream, spec)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	fp.mu.Lock()
	fp.next++
	id := strconv.Itoa(fp.next)
	fp.proxies[id] = p
	fp.mu.Unlock()
	reply(w, http.StatusCreated, map[string]string{"id": id, "url": p.url})
}

func (fp *FaultProxy) proxy(w http.ResponseWriter, r *http.Request) (*dropProxy, bool) {
	fp.mu.Lock()
	defer fp.mu.Unlock()
	p, ok := fp.proxies[r.PathValue("id")]
	if !ok {
		http.Error(w, "no such proxy", http.StatusNotFound)
	}
	return p, ok
}

func (fp *FaultProxy) report(w http.ResponseWriter, r *http.Request) {
	p, ok := fp.proxy(w, r)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	reply(w, http.StatusOK, map[string]any{"dropped": p.dropped, "forwarded": p.forwarded})
}

func (fp *FaultProxy) close(w http.ResponseWriter, r *http.Request) {
	p, ok := fp.proxy(w, r)
	if !ok {
		return
	}
	fp.mu.Lock()
	delete(fp.proxies, r.PathValue("id"))
	fp.mu.Unlock()
	_ = p.server.Close()
	w.WriteHeader(http.StatusNoContent)
}

// dropProxy is one proxy opened through the control API.
type dropProxy struct {
	url      string
	upstream *url.URL
	spec     faultSpec
	server   *http.Server
	client   *http.Client

	mu        sync.Mutex
	dropped   int
	matched   int // matching requests so far
	forwarded []Forwarded
}

func startDropProxy(upstream *url.URL, spec faultSpec) (*dropProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fault proxy: %w", err)
	}
	p := &dropProxy{url: "http://" + ln.Addr().String(), upstream: upstream, spec: spec, forwarded: []Forwarded{},
		// Redirects and cookies are the client's business: the proxy
		// passes on what the service answered.
		client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	p.server = &http.Server{Handler: http.HandlerFunc(p.forward), ReadHeaderTimeout: time.Minute}
	go func() { _ = p.server.Serve(ln) }()
	return p, nil
}

// forward sends the request to the service (its bearer token broken when
// spec.RefuseTokens says so), waits for its whole answer, and then either
// passes it on or, for the first spec.Drop matching requests, closes the
// connection without a response.
func (p *dropProxy) forward(w http.ResponseWriter, r *http.Request) {
	// Hop-by-hop headers are not passed on (RFC 9110 7.6.1).
	hopHeaders := []string{"Connection", "Keep-Alive", "Proxy-Connection", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	out.URL.Scheme, out.URL.Host, out.Host = p.upstream.Scheme, p.upstream.Host, p.upstream.Host
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	matching := r.Method == p.spec.Method && strings.HasPrefix(r.URL.RequestURI(), p.spec.PathPrefix)
	refused := false
	if matching {
		p.mu.Lock()
		refused = p.matched >= p.spec.RefuseFrom && p.matched < p.spec.RefuseFrom+p.spec.RefuseTokens
		p.matched++
		p.mu.Unlock()
	}
	if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); refused && ok {
		out.Header.Set("Authorization", "Bearer "+breakSignature(bearer))
	}
	resp, err := p.client.Do(out)
	if err != nil {
		http.Error(w, "fault proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	if p.spec.CutAfterEvents > 0 && matching {
		p.stream(w, r, resp, hopHeaders, refused)
		return
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		http.Error(w, "fault proxy: "+err.Error(), http.StatusBadGateway)
		return
	}
	headers := map[string]string{}
	for name := range r.Header {
		headers[name] = r.Header.Get(name)
	}
	p.mu.Lock()
	drop := matching && p.dropped < p.spec.Drop
	if drop {
		p.dropped++
	}
	p.forwarded = append(p.forwarded, Forwarded{Method: r.Method, Target: r.URL.RequestURI(), Headers: headers,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Dropped: drop, TokenRefused: refused})
	p.mu.Unlock()
	if drop {
		// net/http closes the connection without writing a response.
		panic(http.ErrAbortHandler)
	}
	for name, values := range resp.Header {
		for _, v := range values {
			w.Header().Add(name, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(body)
}

// stream passes a matching answer on as it arrives, line by line, and cuts
// the connection after spec.CutAfterEvents events while fewer than
// spec.Drop answers were cut. refused says the request's token was broken.
func (p *dropProxy) stream(w http.ResponseWriter, r *http.Request, resp *http.Response, hopHeaders []string, refused bool) {
	defer resp.Body.Close()
	headers := map[string]string{}
	for name := range r.Header {
		headers[name] = r.Header.Get(name)
	}
	p.mu.Lock()
	cut := p.dropped < p.spec.Drop
	if cut {
		p.dropped++
	}
	p.forwarded = append(p.forwarded, Forwarded{Method: r.Method, Target: r.URL.RequestURI(), Headers: headers,
		IdempotencyKey: r.Header.Get("Idempotency-Key"), Dropped: cut, TokenRefused: refused})
	p.mu.Unlock()
	for name, values := range resp.Header {
		for _, v := range values {
			w.Header().Add(name, v)
		}
	}
	for _, h := range hopHeaders {
		w.Header().Del(h)
	}
	w.Header().Del("Content-Length")
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)
	lines := bufio.NewReader(resp.Body)
	events, hasData := 0, false
	for {
		line, err := lines.ReadString('\n')
		if _, werr := io.WriteString(w, line); werr != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
		if err != nil {
			return
		}
		switch trimmed := strings.TrimRight(line, "\r\n"); {
		case strings.HasPrefix(trimmed, "data:"):
			hasData = true
		case trimmed == "" && hasData:
			hasData = false
			events++
			if cut && events >= p.spec.CutAfterEvents {
				// net/http closes the connection in the middle of the
				// chunked body, without its last chunk.
				panic(http.ErrAbortHandler)
			}
		}
	}
}

// breakSignature returns the JWT with a signature that does not verify:
// the service refuses it with its own 401 invalid_token.
func breakSignature(jwt string) string {
	return jwt[:strings.LastIndex(jwt, ".")+1] + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{0}, 64))
}
