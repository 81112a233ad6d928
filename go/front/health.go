package front

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The two methods of grpc.health.v1.Health that a front answers itself
// once enabled (Health.Enable). Other methods of the service (List) are
// routed like any other path.
const (
	healthCheckPath = "/grpc.health.v1.Health/Check"
	healthWatchPath = "/grpc.health.v1.Health/Watch"
)

// detailsBadRequest is grpcio's status details for request bytes its
// deserializer refuses.
const detailsBadRequest = "Exception deserializing request!"

// watchBacklog bounds the statuses queued for one Watch stream whose client
// reads slower than statuses change; past it the oldest queued one is
// dropped, so the stream always ends on the latest status and a stalled
// client can't make the server hold more than this (16 KiB). grpcio's
// queue has no bound: a burst of set() calls, however long, reaches a
// client that reads, and this one is as long as a burst is likely to be.
const watchBacklog = 4096

// healthTable is a front's health status table (service name -> status).
// Its semantics are grpcio-health-checking's: the
// overall entry "" starts SERVING; Check of an unknown service is
// NOT_FOUND; Watch sends the current status (SERVICE_UNKNOWN for an unknown
// service) and then one message per Set of that service (the sync
// servicer's), or with changesOnly, the latest status whenever it differs
// from the last one sent (the aio servicer's, and grpc-go's); Shutdown sets
// every service NOT_SERVING and makes later Sets no-ops.
type healthTable struct {
	// changesOnly applies to the watchers registered after it is set.
	changesOnly atomic.Bool

	mu       sync.Mutex
	statuses map[string]healthpb.HealthCheckResponse_ServingStatus
	shutdown bool
	watchers map[string]map[*healthWatcher]struct{}

	// cancelled is closed (once, by cancelWatches) when a stop's grace
	// has passed: the Watch streams still open end then, as the calls
	// Python serves do (Calls.cancelAll), rather than when the transport
	// closes their connections.
	cancelled  chan struct{}
	cancelOnce sync.Once
}

func newHealthTable() *healthTable {
	return &healthTable{
		statuses:  map[string]healthpb.HealthCheckResponse_ServingStatus{"": healthpb.HealthCheckResponse_SERVING},
		watchers:  make(map[string]map[*healthWatcher]struct{}),
		cancelled: make(chan struct{}),
	}
}

// healthWatcher is one Watch stream's queue of statuses to send. Set
// appends under the table's lock and never blocks; the stream's goroutine
// takes them.
type healthWatcher struct {
	changesOnly bool

	mu      sync.Mutex
	pending []healthpb.HealthCheckResponse_ServingStatus
	wake    chan struct{} // capacity 1: "pending may have grown"
	// The last status taken, for changesOnly.
	last  healthpb.HealthCheckResponse_ServingStatus
	taken bool
}

func (w *healthWatcher) push(s healthpb.HealthCheckResponse_ServingStatus) {
	w.mu.Lock()
	switch {
	case w.changesOnly:
		w.pending = append(w.pending[:0], s)
	case len(w.pending) >= watchBacklog:
		w.pending = append(w.pending[1:], s)
	default:
		w.pending = append(w.pending, s)
	}
	w.mu.Unlock()
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// take returns the statuses to send now, in order.
func (w *healthWatcher) take() []healthpb.HealthCheckResponse_ServingStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.pending
	w.pending = nil
	if w.changesOnly && len(out) == 1 {
		if w.taken && out[0] == w.last {
			return nil
		}
		w.last, w.taken = out[0], true
	}
	return out
}

func (h *healthTable) check(service string) (healthpb.HealthCheckResponse_ServingStatus, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.statuses[service]
	return s, ok
}

// set records a status and queues it for the service's watchers, unless
// the table is shut down.
func (h *healthTable) set(service string, s healthpb.HealthCheckResponse_ServingStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.shutdown {
		h.setLocked(service, s)
	}
}

func (h *healthTable) setLocked(service string, s healthpb.HealthCheckResponse_ServingStatus) {
	h.statuses[service] = s
	for w := range h.watchers[service] {
		w.push(s)
	}
}

// enterShutdown sets every service NOT_SERVING, for good.
func (h *healthTable) enterShutdown() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.shutdown {
		return
	}
	for service := range h.statuses {
		h.setLocked(service, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	h.shutdown = true
}

// watch registers a watcher whose queue starts with the current status,
// taken under the same lock as the registration so that no Set is missed.
func (h *healthTable) watch(service string) *healthWatcher {
	w := &healthWatcher{wake: make(chan struct{}, 1), changesOnly: h.changesOnly.Load()}
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.statuses[service]
	if !ok {
		s = healthpb.HealthCheckResponse_SERVICE_UNKNOWN
	}
	w.push(s)
	if h.watchers[service] == nil {
		h.watchers[service] = make(map[*healthWatcher]struct{})
	}
	h.watchers[service][w] = struct{}{}
	return w
}

func (h *healthTable) unwatch(service string, w *healthWatcher) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.watchers[service], w)
	if len(h.watchers[service]) == 0 {
		delete(h.watchers, service)
	}
}

// Health is a front's native grpc.health.v1.Health service: off until
// Enable, then answered from its status table by the front itself, so that
// probes never wait for Python (not for the GIL, not for a free worker).
type Health struct {
	table atomic.Pointer[healthTable] // nil until Enable; never replaced
	// answered: the HealthMethods answered (bits only ever added).
	answered atomic.Uint32
}

// HealthMethods says which of grpc.health.v1.Health's methods the front
// answers: a server that registered only one of them (or its servicer
// under another name) has the other answered as any other path.
type HealthMethods uint32

const (
	HealthCheck HealthMethods = 1 << iota
	HealthWatch
)

// Enable makes the front answer methods of grpc.health.v1.Health itself,
// from its status table, from now on. changesOnly chooses how Watch
// streams that start from now on follow the table (healthTable). Enabling
// again keeps the table and adds methods to those answered.
func (hs *Health) Enable(changesOnly bool, methods HealthMethods) {
	hs.table.CompareAndSwap(nil, newHealthTable())
	hs.table.Load().changesOnly.Store(changesOnly)
	for {
		old := hs.answered.Load()
		if hs.answered.CompareAndSwap(old, old|uint32(methods)) {
			return
		}
	}
}

// errHealthDisabled is Set or EnterShutdown before Enable.
var errHealthDisabled = &LifecycleError{"the native health service is not enabled; call enable_health() first"}

// Set sets a service's status ("" is the whole server's). It is ignored
// after EnterShutdown.
func (hs *Health) Set(service string, s int32) error {
	t := hs.table.Load()
	if t == nil {
		return errHealthDisabled
	}
	t.set(service, healthpb.HealthCheckResponse_ServingStatus(s))
	return nil
}

// EnterShutdown sets every service NOT_SERVING and ignores later Set
// calls, as grpcio-health-checking's enter_graceful_shutdown().
func (hs *Health) EnterShutdown() error {
	t := hs.table.Load()
	if t == nil {
		return errHealthDisabled
	}
	t.enterShutdown()
	return nil
}

// cancelWatches ends the Watch streams open now and from now on with
// UNAVAILABLE "Cancelling all calls", as grpcio's server ends every call
// left when a stop's grace has passed.
func (hs *Health) cancelWatches() {
	if t := hs.table.Load(); t != nil {
		t.cancelOnce.Do(func() { close(t.cancelled) })
	}
}

// answers returns the table that answers a call to path natively, nil for
// a path the service doesn't answer (or while it is off).
func (hs *Health) answers(path string) *healthTable {
	t := hs.table.Load() // first: most fronts never enable health
	if t == nil {
		return nil
	}
	var m HealthMethods
	switch path {
	case healthCheckPath:
		m = HealthCheck
	case healthWatchPath:
		m = HealthWatch
	default:
		return nil
	}
	if HealthMethods(hs.answered.Load())&m == 0 {
		return nil
	}
	return t
}

// serve answers a Check or Watch call from the table.
func (h *healthTable) serve(st ServerStream, path string) error {
	raw, err := st.Request()
	if err != nil {
		return requestMissing(st, err)
	}
	req := &healthpb.HealthCheckRequest{}
	err = proto.Unmarshal(raw.Materialize(), req)
	raw.Free()
	if err != nil {
		return status.Error(codes.Internal, detailsBadRequest)
	}
	if path == healthCheckPath {
		s, ok := h.check(req.GetService())
		if !ok {
			return status.Error(codes.NotFound, "")
		}
		return sendHealth(st, s)
	}
	w := h.watch(req.GetService())
	defer h.unwatch(req.GetService(), w)
	// Ended at the call's own deadline, as calls Python serves are (a
	// little early on grpc-go's transport, so that the client gets
	// DEADLINE_EXCEEDED rather than its reset).
	ctx, stop := beforeDeadline(st)
	defer stop()
	for {
		for _, s := range w.take() {
			if err := sendHealth(st, s); err != nil {
				return err
			}
		}
		st.Flush()
		select {
		case <-w.wake:
		case <-h.cancelled:
			return status.Error(codes.Unavailable, detailsCancellingAll)
		case <-ctx.Done():
			if deadlinePassed(ctx, ctx.Err()) {
				return deadlineStatus.Err()
			}
			return status.Error(codes.Canceled, "Cancelled")
		}
	}
}

func sendHealth(st ServerStream, s healthpb.HealthCheckResponse_ServingStatus) error {
	b, err := proto.Marshal(&healthpb.HealthCheckResponse{Status: s})
	if err != nil {
		return status.Errorf(codes.Internal, "encoding the health status: %v", err)
	}
	return st.SendMessage(mem.BufferSlice{mem.SliceBuffer(b)}, false)
}
