package front

import (
	"bytes"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Prometheus endpoint (Front.EnableMetrics with an address): A66's
// metrics in the Prometheus text format (version 0.0.4), named as
// OpenTelemetry's Prometheus exporter names them (dots become underscores,
// the unit is appended as a word, counters end in _total), and the front's
// own counters and gauges (Front.Metrics) as pygrpc_native_*. It is served
// by Go alone, so it answers while every Python thread is busy or one holds
// the GIL.

// statusNames are grpc.status's values: the codes' canonical names.
var statusNames = [numCodes]string{
	"OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
	"ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
	"ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
	"UNAUTHENTICATED",
}

// gaugeMetrics are the Front.Metrics that go up and down; the others are
// counters.
var gaugeMetrics = map[string]bool{
	"calls_active": true, "events_queued": true, "connections_active": true, "goroutines": true,
}

// metricsServer serves a front's Prometheus endpoint.
type metricsServer struct {
	lis net.Listener
	srv *http.Server
}

// serveMetrics listens on address and serves GET /metrics with what
// exposition writes.
func serveMetrics(address string, exposition func(*bytes.Buffer)) (*metricsServer, error) {
	lis, err := net.Listen("tcp", address)
	if err != nil {
		return nil, &BindError{Address: address, Err: err}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		var b bytes.Buffer
		exposition(&b)
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		_, _ = w.Write(b.Bytes())
	})
	s := &metricsServer{lis: lis, srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = s.srv.Serve(lis) }()
	return s, nil
}

// port is the bound TCP port.
func (s *metricsServer) port() int { return s.lis.Addr().(*net.TCPAddr).Port }

func (s *metricsServer) close() { _ = s.srv.Close() }

// promSeries is one grpc_method label's numbers, the slots it covers
// added up (a method not named is written as "other").
type promSeries struct {
	method  string
	started uint64
	byCode  [numCodes]*[3]histogramSnapshot // duration, sent, rcvd; nil: no call
}

// histogramSnapshot is a histogram's numbers as read.
type histogramSnapshot struct {
	counts []uint64
	sum    uint64
}

func (h *histogramSnapshot) add(from *histogram) {
	if h.counts == nil {
		h.counts = make([]uint64, len(from.counts))
	}
	for i := range from.counts {
		h.counts[i] += from.counts[i].Load()
	}
	h.sum += from.sum.Load()
}

// promMethod is the grpc_method label the endpoint writes for m.
func (c *CallMetrics) promMethod(m *methodSeries) string {
	if m.slot == 0 || c.allMethods || m.registered.Load() {
		return m.name
	}
	return OtherMethod
}

// snapshot reads the series by grpc_method label, in slot order.
func (c *CallMetrics) snapshot() []*promSeries {
	var out []*promSeries
	byMethod := map[string]*promSeries{}
	for _, m := range *c.methods.Load() {
		name := c.promMethod(m)
		ps := byMethod[name]
		if ps == nil {
			ps = &promSeries{method: name}
			byMethod[name] = ps
			out = append(out, ps)
		}
		ps.started += m.started.Load()
		for code := range m.byCode {
			s := m.byCode[code].Load()
			if s == nil {
				continue
			}
			if ps.byCode[code] == nil {
				ps.byCode[code] = new([3]histogramSnapshot)
			}
			h := ps.byCode[code]
			h[0].add(&s.duration)
			h[1].add(&s.sent)
			h[2].add(&s.rcvd)
		}
	}
	return out
}

// WritePrometheus writes A66's metrics in the Prometheus text format.
func (c *CallMetrics) WritePrometheus(b *bytes.Buffer) {
	series := c.snapshot()
	b.WriteString("# HELP grpc_server_call_started_total Number of server calls started.\n")
	b.WriteString("# TYPE grpc_server_call_started_total counter\n")
	for _, ps := range series {
		if ps.started > 0 {
			b.WriteString("grpc_server_call_started_total{grpc_method=")
			writeLabelValue(b, ps.method)
			b.WriteString("} ")
			b.WriteString(strconv.FormatUint(ps.started, 10))
			b.WriteByte('\n')
		}
	}
	histograms := []struct {
		name, help string
		bounds     []float64
		scale      float64 // sum's integer unit to the metric's unit
	}{
		{"grpc_server_call_duration_seconds", "End-to-end time taken to complete a call from server transport's perspective.", LatencyBounds, 1e-9},
		{"grpc_server_call_sent_total_compressed_message_size_bytes", "Compressed message bytes sent per server call.", SizeBounds, 1},
		{"grpc_server_call_rcvd_total_compressed_message_size_bytes", "Compressed message bytes received per server call.", SizeBounds, 1},
	}
	for i, h := range histograms {
		b.WriteString("# HELP " + h.name + " " + h.help + "\n# TYPE " + h.name + " histogram\n")
		for _, ps := range series {
			for code, snaps := range ps.byCode {
				if snaps != nil {
					writeHistogram(b, h.name, ps.method, statusNames[code], h.bounds, h.scale, &snaps[i])
				}
			}
		}
	}
}

func writeHistogram(b *bytes.Buffer, name, method, status string, bounds []float64, scale float64, h *histogramSnapshot) {
	labels := func(le string) {
		b.WriteString("{grpc_method=")
		writeLabelValue(b, method)
		b.WriteString(",grpc_status=\"" + status + "\"")
		if le != "" {
			b.WriteString(",le=\"" + le + "\"")
		}
		b.WriteString("} ")
	}
	var cumulative uint64
	for i := range h.counts {
		cumulative += h.counts[i]
		le := "+Inf"
		if i < len(bounds) {
			le = strconv.FormatFloat(bounds[i], 'g', -1, 64)
		}
		b.WriteString(name + "_bucket")
		labels(le)
		b.WriteString(strconv.FormatUint(cumulative, 10) + "\n")
	}
	b.WriteString(name + "_sum")
	labels("")
	b.WriteString(strconv.FormatFloat(float64(h.sum)*scale, 'g', -1, 64) + "\n")
	b.WriteString(name + "_count")
	labels("")
	b.WriteString(strconv.FormatUint(cumulative, 10) + "\n")
}

// writeLabelValue writes v quoted, escaped as the text format requires.
func writeLabelValue(b *bytes.Buffer, v string) {
	b.WriteByte('"')
	b.WriteString(strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v))
	b.WriteByte('"')
}

// writeFrontMetrics writes Front.Metrics as pygrpc_native_* gauges and
// counters (a counter's name ends in _total, once), and how many per-call records were dropped undrained.
func writeFrontMetrics(b *bytes.Buffer, ms []Metric, dropped uint64) {
	for _, m := range ms {
		name, kind := "pygrpc_native_"+m.Name, "gauge"
		if !gaugeMetrics[m.Name] {
			kind = "counter"
			if !strings.HasSuffix(name, "_total") {
				name += "_total"
			}
		}
		b.WriteString("# TYPE " + name + " " + kind + "\n" + name + " " + strconv.FormatInt(m.Value, 10) + "\n")
	}
	b.WriteString("# TYPE pygrpc_native_metric_records_dropped_total counter\npygrpc_native_metric_records_dropped_total " +
		strconv.FormatUint(dropped, 10) + "\n")
}
