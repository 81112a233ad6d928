package front

import (
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
)

// gRFC A66's server metrics, measured from the transport's CallStats:
//
//	grpc.server.call.started                           counter, {call}, grpc.method
//	grpc.server.call.duration                          histogram, s, grpc.method + grpc.status
//	grpc.server.call.sent_total_compressed_message_size histogram, By, grpc.method + grpc.status
//	grpc.server.call.rcvd_total_compressed_message_size histogram, By, grpc.method + grpc.status
//
// A call is measured from its first HEADERS to its end (trailers written or
// reset), every call the transport carries included (refused, answered by
// Go's health service, cancelled before Python saw it).
//
// Recording takes no lock and allocates nothing once a (method, status)
// pair has been seen: every number is an atomic counter of its own, the
// per-call state comes from a pool, and the method table is copied on write.
// Cardinality is bounded: a method is named only when registered
// (RegisterMethod: what generated code registers) or, with AllMethods, for
// the first maxNamedMethods paths seen; every other call is "other". With
// per-call records on, the first maxNamedMethods paths get slots of their
// own anyway, so that the Python bridge can name them as the
// OpenTelemetry plugin's filter says; the Prometheus endpoint still writes
// them as "other" unless AllMethods. A
// method's name is its path without the leading slash
// ("package.Service/Method"), as A66 and grpcio write it.

// LatencyBounds and SizeBounds are A66's histogram bucket boundaries
// (seconds and bytes). A bucket i counts values in (bounds[i-1], bounds[i]];
// the last one counts values above every bound.
var (
	LatencyBounds = []float64{0, 0.00001, 0.00005, 0.0001, 0.0003, 0.0006, 0.0008, 0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.008, 0.01, 0.013, 0.016, 0.02, 0.025, 0.03, 0.04, 0.05, 0.065, 0.08, 0.1, 0.13, 0.16, 0.2, 0.25, 0.3, 0.4, 0.5, 0.65, 0.8, 1, 2, 5, 10, 20, 50, 100}
	SizeBounds    = []float64{0, 1024, 2048, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864, 268435456, 1073741824, 4294967296}
)

// OtherMethod is the grpc.method of calls to methods not named.
const OtherMethod = "other"

// maxNamedMethods bounds the methods AllMethods names (beyond: "other"),
// so that clients sending arbitrary paths can't grow the tables without
// end.
const maxNamedMethods = 1000

// numCodes is how many status codes have a series of their own; a code
// outside 0..16 is counted as UNKNOWN.
const numCodes = 17

// histogram is one series' buckets, counted with atomics. sum is in the
// unit's integer base (nanoseconds, bytes).
type histogram struct {
	counts []atomic.Uint64
	sum    atomic.Uint64
}

func newHistogram(bounds []float64) histogram {
	return histogram{counts: make([]atomic.Uint64, len(bounds)+1)}
}

// bucketOf is the index of the bucket v falls in.
func bucketOf(bounds []float64, v float64) int { return sort.SearchFloat64s(bounds, v) }

// series is one (method, status) pair's histograms.
type series struct {
	duration, sent, rcvd histogram
}

func newSeries() *series {
	return &series{duration: newHistogram(LatencyBounds), sent: newHistogram(SizeBounds), rcvd: newHistogram(SizeBounds)}
}

// methodSeries is one grpc.method value's series.
type methodSeries struct {
	name       string
	slot       uint32      // index in CallMetrics' method list
	registered atomic.Bool // RegisterMethod named it
	started    atomic.Uint64
	byCode     [numCodes]atomic.Pointer[series] // made at a code's first call
}

// seriesFor returns the series of code, making it at its first use.
func (m *methodSeries) seriesFor(code codes.Code) *series {
	if uint32(code) >= numCodes {
		code = codes.Unknown
	}
	if s := m.byCode[code].Load(); s != nil {
		return s
	}
	m.byCode[code].CompareAndSwap(nil, newSeries())
	return m.byCode[code].Load()
}

// CallMetrics aggregates A66's metrics per method and status; it is the
// CallStats a front installs when metrics are on (Front.EnableMetrics), and
// optionally keeps a CallRecord per call for Python's plugin bridge.
type CallMetrics struct {
	allMethods bool
	records    *recordQueue // nil: no per-call records

	mu      sync.Mutex // serializes method table writers
	byName  atomic.Pointer[map[string]*methodSeries]
	methods atomic.Pointer[[]*methodSeries] // by slot; slot 0 is "other"

	pool   sync.Pool     // of *callMeasure
	shards atomic.Uint32 // shards handed to new callMeasures, in turn
}

// NewCallMetrics makes an empty aggregation. allMethods names every path
// (up to maxNamedMethods) instead of only registered ones; records keeps
// per-call records for DrainRecords.
func NewCallMetrics(allMethods, records bool) *CallMetrics {
	c := &CallMetrics{allMethods: allMethods}
	if records {
		c.records = newRecordQueue()
	}
	other := &methodSeries{name: OtherMethod}
	byName := map[string]*methodSeries{}
	list := []*methodSeries{other}
	c.byName.Store(&byName)
	c.methods.Store(&list)
	c.pool.New = func() any { return &callMeasure{shard: c.shards.Add(1)} }
	return c
}

// RegisterMethod names path's calls in the metrics (grpc.method). Idempotent.
func (c *CallMetrics) RegisterMethod(path string) { c.add(path, true).registered.Store(true) }

// add returns path's series, adding it unless the table is full and
// registered is false.
func (c *CallMetrics) add(path string, registered bool) *methodSeries {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := *c.byName.Load()
	if m, ok := old[path]; ok {
		return m
	}
	list := *c.methods.Load()
	if !registered && len(list) > maxNamedMethods {
		return list[0]
	}
	m := &methodSeries{name: strings.TrimPrefix(path, "/"), slot: uint32(len(list))}
	byName := make(map[string]*methodSeries, len(old)+1)
	for k, v := range old {
		byName[k] = v
	}
	byName[path] = m
	newList := append(list[:len(list):len(list)], m)
	c.methods.Store(&newList)
	c.byName.Store(&byName)
	return m
}

// lookup is path's series: its own when it has one, else "other" (or a new
// one, with allMethods or per-call records).
func (c *CallMetrics) lookup(path string) *methodSeries {
	if m, ok := (*c.byName.Load())[path]; ok {
		return m
	}
	if c.allMethods || c.records != nil {
		return c.add(path, false)
	}
	return (*c.methods.Load())[0]
}

// MethodNames are the methods by slot (CallRecord.Slot): paths without
// their leading slash, and "other" (slot 0). With per-call records, a slot's
// path may be one not registered (see the package comment).
func (c *CallMetrics) MethodNames() []string {
	list := *c.methods.Load()
	out := make([]string, len(list))
	for i, m := range list {
		out[i] = m.name
	}
	return out
}

// callMeasure is one call's state between Begin and End. Messages and End
// come from one goroutine at a time (CallStats), so its fields are plain.
type callMeasure struct {
	m          *methodSeries
	begin      time.Time
	sent, rcvd uint64
	shard      uint32 // its record's shard (recordQueue), fixed when made
}

// Begin implements CallStats.
func (c *CallMetrics) Begin(method string, t time.Time) any {
	m := c.lookup(method)
	m.started.Add(1)
	cm := c.pool.Get().(*callMeasure)
	*cm = callMeasure{m: m, begin: t, shard: cm.shard}
	return cm
}

// messageHeader is the gRPC message prefix (flag and length) that a wire
// size includes and A66's compressed message bytes don't (grpcio and
// grpc-go count the message alone).
const messageHeader = 5

// Messages implements CallStats.
func (c *CallMetrics) Messages(call any, out bool, count, wireSize int) {
	cm := call.(*callMeasure)
	n := uint64(max(wireSize-count*messageHeader, 0))
	if out {
		cm.sent += n
	} else {
		cm.rcvd += n
	}
}

// End implements CallStats. A reset call counts as CANCELLED (or
// DEADLINE_EXCEEDED when the transport says so), as grpcio's server reports
// a stream that ended without trailers.
func (c *CallMetrics) End(call any, t time.Time, code codes.Code, reset bool) {
	cm := call.(*callMeasure)
	if reset && code != codes.DeadlineExceeded {
		code = codes.Canceled
	}
	if uint32(code) >= numCodes {
		code = codes.Unknown
	}
	d := t.Sub(cm.begin)
	if d < 0 {
		d = 0
	}
	s := cm.m.seriesFor(code)
	s.duration.counts[bucketOf(LatencyBounds, d.Seconds())].Add(1)
	s.duration.sum.Add(uint64(d))
	s.sent.counts[bucketOf(SizeBounds, float64(cm.sent))].Add(1)
	s.sent.sum.Add(cm.sent)
	s.rcvd.counts[bucketOf(SizeBounds, float64(cm.rcvd))].Add(1)
	s.rcvd.sum.Add(cm.rcvd)
	if c.records != nil {
		c.records.push(CallRecord{Slot: cm.m.slot, Code: uint32(code), DurationNs: uint64(d), Sent: cm.sent, Rcvd: cm.rcvd}, cm.shard)
	}
	*cm = callMeasure{shard: cm.shard}
	c.pool.Put(cm)
}

// Started is the started count of each method slot.
func (c *CallMetrics) Started() []uint64 {
	list := *c.methods.Load()
	out := make([]uint64, len(list))
	for i, m := range list {
		out[i] = m.started.Load()
	}
	return out
}
