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
// most that, once, and never stops them (see fetchRefresh). Calls on
// connections already made don't come here.

// fetchTimeout is how long a handshake waits for Python's fetcher (a
// variable for tests only).
var fetchTimeout = 5 * time.Second

type fetchRequest struct {
	id     uint64
	source int64
	reply  chan []byte // nil: keep the current configuration
}

// fetches are the requests waiting for Python: queued ones in queue, all
// of them by id in pending until answered (a source has at most one
// unanswered, so pending stays small; the queue bounds the rest).
var fetches = struct {
	mu      sync.Mutex
	next    uint64
	pending map[uint64]*fetchRequest
	queue   chan *fetchRequest
}{pending: make(map[uint64]*fetchRequest), queue: make(chan *fetchRequest, 256)}

// fetchRefresh is a tlsSource's refresh that asks fetcher number source.
// Its calls are serialized by the source (refreshMu). A request that isn't
// answered within fetchTimeout stays posted: until Python answers it, the
// following handshakes don't wait (a stuck fetcher costs one timeout, not
// one per handshake), and its late answer serves the next handshake.
func fetchRefresh(source int64) func() *tlsMaterial {
	var late *fetchRequest
	return func() *tlsMaterial {
		if late != nil {
			select {
			case doc := <-late.reply:
				late = nil
				return fetchedMaterial(doc)
			default:
				return nil
			}
		}
		req := postFetch(source)
		if req == nil {
			log.Printf("pygrpc_native: too many TLS credential fetches are waiting; the current credentials stay in use")
			return nil
		}
		timer := time.NewTimer(fetchTimeout)
		defer timer.Stop()
		select {
		case doc := <-req.reply:
			return fetchedMaterial(doc)
		case <-timer.C:
			late = req
			log.Printf("pygrpc_native: the TLS credentials fetcher did not answer within %v; the current credentials stay in use until it does", fetchTimeout)
			return nil
		}
	}
}

// fetchedMaterial reads a fetcher's answer; nil (keep the current
// configuration) for none or one that can't be read, which is logged.
func fetchedMaterial(doc []byte) *tlsMaterial {
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

// postFetch queues a request for Python; nil when the queue is full.
func postFetch(source int64) *fetchRequest {
	req := &fetchRequest{source: source, reply: make(chan []byte, 1)}
	fetches.mu.Lock()
	fetches.next++
	req.id = fetches.next
	fetches.pending[req.id] = req
	fetches.mu.Unlock()
	select {
	case fetches.queue <- req:
		return req
	default:
		fetches.mu.Lock()
		delete(fetches.pending, req.id)
		fetches.mu.Unlock()
		return nil
	}
}

// NextFetch waits up to wait for a handshake's request and returns its id
// and the number of the fetcher to run; ok false: none came.
func NextFetch(wait time.Duration) (id uint64, source int64, ok bool) {
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case req := <-fetches.queue:
		return req.id, req.source, true
	case <-timer.C:
		return 0, 0, false
	}
}

// FetchDone answers request id: doc is new key material ({"pairs": ...,
// "roots": ...}), or nil to keep the current configuration. A request is
// answered once; other answers are dropped.
func FetchDone(id uint64, doc []byte) {
	fetches.mu.Lock()
	req := fetches.pending[id]
	delete(fetches.pending, id)
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
