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

// WritePrometheus writes A66's metrics in the Prometheus text format.
func (c *CallMetrics) WritePrometheus(b *bytes.Buffer) {
	methods := *c.methods.Load()
	b.WriteString("# HELP grpc_server_call_started_total Number of server calls started.\n")
	b.WriteString("# TYPE grpc_server_call_started_total counter\n")
	for _, m := range methods {
		if n := m.started.Load(); n > 0 {
			b.WriteString("grpc_server_call_started_total{grpc_method=")
			writeLabelValue(b, m.name)
			b.WriteString("} ")
			b.WriteString(strconv.FormatUint(n, 10))
			b.WriteByte('\n')
		}
	}
	histograms := []struct {
		name, help string
		bounds     []float64
		scale      float64 // sum's integer unit to the metric's unit
		of         func(*series) *histogram
	}{
		{"grpc_server_call_duration_seconds", "End-to-end time taken to complete a call from server transport's perspective.", LatencyBounds, 1e-9, func(s *series) *histogram { return &s.duration }},
		{"grpc_server_call_sent_total_compressed_message_size_bytes", "Compressed message bytes sent per server call.", SizeBounds, 1, func(s *series) *histogram { return &s.sent }},
		{"grpc_server_call_rcvd_total_compressed_message_size_bytes", "Compressed message bytes received per server call.", SizeBounds, 1, func(s *series) *histogram { return &s.rcvd }},
	}
	for _, h := range histograms {
		b.WriteString("# HELP " + h.name + " " + h.help + "\n# TYPE " + h.name + " histogram\n")
		for _, m := range methods {
			for code := range m.byCode {
				s := m.byCode[code].Load()
				if s == nil {
					continue
				}
				writeHistogram(b, h.name, m.name, statusNames[code], h.bounds, h.scale, h.of(s))
			}
		}
	}
}

func writeHistogram(b *bytes.Buffer, name, method, status string, bounds []float64, scale float64, h *histogram) {
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
		cumulative += h.counts[i].Load()
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
	b.WriteString(strconv.FormatFloat(float64(h.sum.Load())*scale, 'g', -1, 64) + "\n")
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
