package front

import (
	"bytes"
	"errors"
	"time"
)

// MetricsConfig turns on a front's A66 metrics (Front.EnableMetrics).
// Measuring costs nothing until then.
type MetricsConfig struct {
	// Address, if not empty, serves the Prometheus endpoint there
	// (host:port; port 0 picks one).
	Address string
	// AllMethods names every method path in grpc.method (up to
	// maxNamedMethods), not only registered ones (RegisterMethod).
	AllMethods bool
	// Records keeps a record of each ended call for DrainRecords (the
	// Python bridge to OpenTelemetry's API).
	Records bool
}

// errMetricsOn: EnableMetrics was called before.
var errMetricsOn = errors.New("metrics are already enabled on this server")

// EnableMetrics measures every call from Start on, and serves the
// Prometheus endpoint when cfg has an address; it returns the endpoint's
// port (0 without one). Once, and only before Start.
func (f *Front) EnableMetrics(cfg MetricsConfig) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.phase.checkNew(); err != nil {
		return 0, err
	}
	if f.callMetrics != nil {
		return 0, errMetricsOn
	}
	cm := NewCallMetrics(cfg.AllMethods, cfg.Records)
	port := 0
	if cfg.Address != "" {
		srv, err := serveMetrics(cfg.Address, func(b *bytes.Buffer) {
			cm.WritePrometheus(b)
			writeFrontMetrics(b, f.Metrics(), cm.DroppedRecords())
		})
		if err != nil {
			return 0, err
		}
		f.metricsSrv, port = srv, srv.port()
	}
	f.callMetrics, f.stats = cm, cm
	return port, nil
}

// CallMetrics is the front's A66 aggregation; nil unless EnableMetrics.
func (f *Front) CallMetrics() *CallMetrics {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.callMetrics
}

// DrainCallRecords moves up to len(dst) ended calls' records into dst,
// waiting up to wait for the first; stopped reports that the front has
// stopped and no record is left.
func (f *Front) DrainCallRecords(dst []CallRecord, wait time.Duration) (n int, stopped bool) {
	cm := f.CallMetrics()
	if cm == nil {
		return 0, f.phase.get() == phaseStopped
	}
	n = cm.DrainRecords(dst, wait, f.stopped)
	return n, n == 0 && f.phase.get() == phaseStopped
}
