package front

import (
	"encoding/json"
	"log"
	"sync"
	"time"
)

// Fetching TLS key material from Python before a handshake (grpcio's
// dynamic_ssl_server_credentials). Go never calls into Python: a handshake
// posts a request here and waits; a Python thread of pygrpc_native waits
// in NextFetch (GIL released), runs the fetcher registered under the
// request's number with the GIL, and answers with FetchDone. A handshake
// that gets no answer within fetchTimeout keeps the current configuration,
// so a stuck fetcher or a busy interpreter delays new connections by at
// most that, and never stops them. Calls on connections already made
// don't come here.

// fetchTimeout is how long a handshake waits for Python's fetcher (a
// variable for tests only).
var fetchTimeout = 5 * time.Second

type fetchRequest struct {
	id     uint64
	source int64
	reply  chan []byte // nil: keep the current configuration
}

// fetches are the requests waiting for Python: queued ones in queue, all
// of them by id in pending until answered or given up.
var fetches = struct {
	mu      sync.Mutex
	next    uint64
	pending map[uint64]*fetchRequest
	queue   chan *fetchRequest
}{pending: make(map[uint64]*fetchRequest), queue: make(chan *fetchRequest, 256)}

// fetchRefresh is a tlsSource's refresh that asks fetcher number source.
func fetchRefresh(source int64) func() *tlsMaterial {
	return func() *tlsMaterial {
		doc, ok := askFetcher(source)
		if !ok {
			log.Printf("pygrpc_native: the TLS credentials fetcher did not answer within %v; the current credentials stay in use", fetchTimeout)
			return nil
		}
		if doc == nil {
			return nil
		}
		m, err := parseMaterial(doc)
		if err != nil {
			log.Printf("pygrpc_native: the TLS credentials fetcher returned credentials that can't be used, the current ones stay in use: %v", err)
			return nil
		}
		return m
	}
}

// askFetcher posts a request and waits for its answer; ok false: none
// within fetchTimeout.
func askFetcher(source int64) (doc []byte, ok bool) {
	req := &fetchRequest{source: source, reply: make(chan []byte, 1)}
	fetches.mu.Lock()
	fetches.next++
	req.id = fetches.next
	fetches.pending[req.id] = req
	fetches.mu.Unlock()
	defer func() {
		fetches.mu.Lock()
		delete(fetches.pending, req.id)
		fetches.mu.Unlock()
	}()
	timer := time.NewTimer(fetchTimeout)
	defer timer.Stop()
	select {
	case fetches.queue <- req:
	case <-timer.C:
		return nil, false
	}
	select {
	case doc := <-req.reply:
		return doc, true
	case <-timer.C:
		return nil, false
	}
}

// NextFetch waits up to wait for a handshake's request and returns its id
// and the number of the fetcher to run; ok false: none came. Requests
// whose handshake gave up waiting are skipped.
func NextFetch(wait time.Duration) (id uint64, source int64, ok bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case req := <-fetches.queue:
			fetches.mu.Lock()
			_, waiting := fetches.pending[req.id]
			fetches.mu.Unlock()
			if waiting {
				return req.id, req.source, true
			}
		case <-timer.C:
			return 0, 0, false
		}
	}
}

// FetchDone answers request id: doc is new key material ({"pairs": ...,
// "roots": ...}), or nil to keep the current configuration. An answer
// that comes too late is dropped.
func FetchDone(id uint64, doc []byte) {
	fetches.mu.Lock()
	req := fetches.pending[id]
	delete(fetches.pending, id) // answered once
	fetches.mu.Unlock()
	if req != nil {
		req.reply <- doc
	}
}

// parseMaterial reads {"pairs": [[key, chain], ...], "roots": ...}.
func parseMaterial(doc []byte) (*tlsMaterial, error) {
	var m tlsMaterial
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, configErrorf("invalid TLS key material: %v", err)
	}
	return &m, nil
}
