package front

import (
	"sync"
	"time"
)

// Front is one native gRPC server: its lifecycle (Bind, Start, Stop) and
// what may change while it runs (methods, the TLS of later binds). The work
// of a running front is split among types that each own their state, as
// grpc-go keeps its Server, transports and streams apart:
//
//	transport      HTTP/2 and gRPC framing: grpc-go's server behind the
//	               seam of transport.go (grpcgo.go)
//	handler        admits each call and serves it on the call's goroutine
//	               (handler.go, stream.go, requests.go)
//	Calls          Python's side of live calls: the call table and the
//	               operations on one call by id (calls.go)
//	Events         the events Python takes (events.go)
//	Health         the native health service (health.go)
//	fallbackRelay  calls relayed to the fallback server (proxy.go)
//
// Front only wires them together and decides when they start and stop.
type Front struct {
	cfg     *Config
	phase   phase
	m       metrics
	methods *methodTable
	calls   *Calls
	events  *Events
	health  Health
	relay   *fallbackRelay // nil without a fallback server
	handler *handler
	stats   CallStats // nil: no stats (SetStats)

	callMetrics *CallMetrics   // nil: metrics off (EnableMetrics)
	metricsSrv  *metricsServer // nil: no Prometheus endpoint

	mu sync.Mutex // serializes Bind, Start, SetTLS and BeginStop; guards the fields below
	// tls is the security of listeners bound from now on (SetTLS); nil:
	// plaintext.
	tls       *PortSecurity
	srv       transportServer
	listeners listenerSet
	serveDone sync.WaitGroup // one per listener's Serve
	clock     *stopClock     // set when a stop begins
	stopped   chan struct{}  // closed once the front has stopped
}

// New builds a front from cfg. Nothing is bound until Start.
func New(cfg *Config) (*Front, error) {
	f := &Front{
		cfg:     cfg,
		tls:     cfg.TLS,
		methods: newMethodTable(cfg.Methods),
		stopped: make(chan struct{}),
	}
	f.listeners.limits, f.listeners.m = &cfg.Limits, &f.m
	f.events = newEvents(&f.m)
	if cfg.Fallback != "" {
		relay, err := newFallbackRelay(cfg.Fallback, cfg.Limits.MaxSendMsgSize, &f.m)
		if err != nil {
			return nil, err
		}
		f.relay = relay
	}
	f.calls = &Calls{
		table:       callTable{phase: &f.phase},
		methods:     f.methods,
		events:      f.events,
		slots:       slots{limit: int64(cfg.MaxConcurrentRPCs)},
		holdSlots:   cfg.HoldSlots,
		hasFallback: f.relay != nil,
		levelSet:    cfg.Limits.Compression.LevelSet,
		sendLimit:   -1,
		m:           &f.m,
	}
	if cfg.RaiseSendLimit {
		f.calls.sendLimit = cfg.Limits.MaxSendMsgSize
	}
	f.handler = &handler{
		cfg:      cfg,
		phase:    &f.phase,
		m:        &f.m,
		methods:  f.methods,
		calls:    f.calls,
		events:   f.events,
		health:   &f.health,
		fallback: f.relay,
	}
	return f, nil
}

// Calls is Python's side of the front's live calls.
func (f *Front) Calls() *Calls { return f.calls }

// Events is the queue of events for Python.
func (f *Front) Events() *Events { return f.events }

// Health is the front's native health service.
func (f *Front) Health() *Health { return &f.health }

// Bind listens on address (the configured one when empty) without serving
// yet, with the TLS configuration SetTLS gave last, and returns the bound
// port (1 for a Unix socket, as grpcio). Connections wait in the backlog
// until Start. A front binds any number of addresses; every one serves the
// same methods.
func (f *Front) Bind(address string) (int, error) {
	if err := f.phase.checkNew(); err != nil {
		return 0, err // without waiting for a Stop in progress
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.phase.checkNew(); err != nil {
		return 0, err
	}
	if address == "" {
		address = f.cfg.Address
	}
	return f.listeners.bind(address, f.tls)
}

// SetTLS makes the listeners bound from now on (Bind, or Start binding the
// configured address) serve TLS with cfg (nil: plaintext); it replaces the
// credentials the front was created with. Listeners bound earlier keep
// theirs. Only before Start.
func (f *Front) SetTLS(cfg *PortSecurity) error {
	if err := f.phase.checkNew(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.phase.checkNew(); err != nil {
		return err
	}
	f.tls = cfg
	return nil
}

// UpdateTLS replaces the key material of every TLS port (see
// PortSecurity.Update) for handshakes from now on. Errors when no port
// serves TLS.
func (f *Front) UpdateTLS(material []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	updated := map[*tlsSource]bool{}
	for _, lis := range f.listeners.all {
		if lis.sec == nil || lis.sec.source == nil || updated[lis.sec.source] {
			continue
		}
		if err := lis.sec.Update(material); err != nil {
			return err
		}
		updated[lis.sec.source] = true
	}
	if len(updated) == 0 {
		return configErrorf("no port of this front serves TLS; there are no credentials to replace")
	}
	return nil
}

// SetStats makes the transport report every call's life to cs (see
// CallStats), from Start on. Only before Start.
func (f *Front) SetStats(cs CallStats) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.phase.checkNew(); err != nil {
		return err
	}
	f.stats = cs
	return nil
}

// Start binds the configured address unless Bind already did, and serves.
func (f *Front) Start() error {
	if err := f.phase.checkNew(); err != nil {
		return err // without waiting for a Stop in progress
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.phase.checkNew(); err != nil {
		return err
	}
	if f.listeners.empty() {
		if _, err := f.listeners.bind(f.cfg.Address, f.tls); err != nil {
			return err
		}
	}
	if f.cfg.Transport == TransportH2 {
		f.srv = newH2Server(&f.cfg.Limits, f.handler, f.stats)
	} else {
		f.srv = newGRPCGoServer(&f.cfg.Limits, f.handler, f.listeners.anySecure(), f.stats, &f.listeners.open)
	}
	f.phase.set(phaseServing)
	for _, lis := range f.listeners.all {
		f.serveDone.Add(1)
		go func() {
			defer f.serveDone.Done()
			_ = f.srv.Serve(lis)
		}()
	}
	return nil
}

// Port is the first bound port (1 for a Unix socket), or 0 before Start.
func (f *Front) Port() int { return f.listeners.firstPort() }

// BeginStop refuses new calls before it returns (the listener is closed,
// and connections get GOAWAY), gives calls in flight up to grace to finish
// (grace < 0: none), then cancels the rest, in the background. When every
// handler has ended the event queues are closed, so Events.Recv drains
// them and reports closed, and Stop returns. Stopping a stopped front does
// nothing. A BeginStop while a stop is under way can only shorten it, as
// grpcio's stop(): calls are cancelled at the earliest of the stops'
// deadlines. Frames an event loop held (SendHeld) go out first.
func (f *Front) BeginStop(grace time.Duration) {
	f.calls.FlushHeld()
	f.mu.Lock()
	defer f.mu.Unlock()
	switch f.phase.get() {
	case phaseStopped:
		return
	case phaseStopping:
		f.clock.shorten(grace)
		return
	case phaseNew:
		f.listeners.close()
		f.finishStop()
		return
	}
	f.phase.set(phaseStopping)
	f.listeners.close()
	f.clock = newStopClock(grace)
	srv, clock := f.srv, f.clock
	if c, ok := srv.(stopCanceller); ok && grace < 0 {
		c.cancelsAllOnStop()
	}
	drained := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(drained)
	}()
	go func() {
		clock.wait(drained, func() {
			// The calls left end with a status, written as their
			// connections drain; what isn't written within stopFlush is
			// cut off by the transport's stop.
			f.calls.cancelAll()
			f.health.cancelWatches()
			t := time.NewTimer(stopFlush)
			select {
			case <-drained:
			case <-t.C:
			}
			t.Stop()
			srv.Stop()
		})
		<-drained
		f.serveDone.Wait()
		f.finishStop()
	}()
}

// finishStop ends what outlives the server: the fallback connection and
// the event queues (Events.Recv drains them, then reports closed).
func (f *Front) finishStop() {
	if f.relay != nil {
		f.relay.close()
	}
	if f.metricsSrv != nil {
		f.metricsSrv.close()
	}
	f.phase.set(phaseStopped)
	f.events.close()
	close(f.stopped)
}

// Stop is BeginStop, then waits until the front has stopped.
func (f *Front) Stop(grace time.Duration) {
	f.BeginStop(grace)
	<-f.stopped
}

// Close stops the front at once and releases what it holds beyond the
// server (the EventFD pipe). The front is unusable afterwards.
func (f *Front) Close() {
	f.Stop(-1)
	f.events.release()
}

// AddMethod serves a method natively from now on and returns its id
// (m.Fallback is AddFallbackMethod's).
func (f *Front) AddMethod(m Method) (int32, error) {
	if m.Fallback {
		return 0, configErrorf("use AddFallbackMethod for a fallback method")
	}
	return f.methods.add(m)
}

// AddFallbackMethod relays every call of a method to the fallback server
// from now on, without asking Python.
func (f *Front) AddFallbackMethod(path string) error {
	if f.relay == nil {
		return errNoFallback
	}
	_, err := f.methods.add(Method{Path: path, Fallback: true})
	return err
}

// Metrics returns the counters under MetricNames.
func (f *Front) Metrics() []Metric { return f.m.snapshot(f.events.queued()) }
