// Command loadgen is a gRPC load generator for the pygrpc-native
// benchmarks: saturating by default, or paced at a fixed rate.
//
// It keeps -conns connections with -concurrency callers on each, for -warmup
// and then -duration, and prints one JSON object with what it measured.
// Without -rate each caller starts its next call as soon as the last one
// ends (closed loop: the server is the bottleneck). With -rate N the callers
// together start N calls per second, evenly spaced, each call by whichever
// caller is free (see pacer); the JSON gives the rate asked for
// (target_rate), the rate achieved (calls_per_s) and the slots skipped
// because every caller was still in a call for too long (skipped_slots).
// Latencies run from a call's start, not from its slot.
//
// Calls are unary echoes (-method, default /echo.Echo/Say), or with
// -stream-messages N server-streaming calls (-method /echo.Echo/Count): the
// request is N as 4 big-endian bytes followed by the -payload body, and the
// server must send the body back N times; a call counts when all N messages
// arrived intact and the status is OK, and its latency runs to the status.
// With -client-messages N the calls are client-streaming (-method
// /echo.Echo/Collect): N messages of the -payload body, a half-close, and the
// one response must be the body. With -pingpong N they are bidi
// (-method /echo.Echo/Chat): N times, send the body and wait for its echo,
// then half-close; the call counts when N echoes came intact, nothing more,
// and the status is OK. A stream counts as one call in calls, calls_per_s and
// the latencies, whatever its messages. Messages are raw bytes (a pass-through codec named "proto"),
// so neither side of the benchmark pays for protobuf in the client. Unlike
// h2load it checks every call's gRPC status and every response body, and
// counts failures by status code.
//
// With -sync it also prints a line "MEASURE_START" when the warmup ends and
// "MEASURE_END" when the measured window closes, before the JSON, so that a
// driver can sample the server's CPU time over exactly that window.
//
// With -tls it connects over TLS, trusting the CA certificates in -ca (PEM)
// and checking the server's certificate against -server-name (the name the
// test certificate was made for, since the address is an IP).
//
// It only talks to loopback addresses and always exits within
// warmup + duration + -drain (plus connection setup).
package main

import (
	"bufio"
	"context"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
)

// rawCodec sends a []byte as the message and checks the response against
// the expected bytes without copying it. Its name is "proto" so the
// content-type is the ordinary application/grpc+proto.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("loadgen codec: cannot marshal %T", v)
	}
	if len(*b) == 0 {
		return nil, nil
	}
	return mem.BufferSlice{mem.SliceBuffer(*b)}, nil
}

// response is what a call unmarshals into: the bytes it expects back, and
// whether they matched.
type response struct {
	expect []byte
	match  bool
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*response)
	if !ok {
		return fmt.Errorf("loadgen codec: cannot unmarshal into %T", v)
	}
	r.match = false
	if data.Len() != len(r.expect) {
		return nil
	}
	off := 0
	for _, buf := range data {
		seg := buf.ReadOnlyData()
		if string(seg) != string(r.expect[off:off+len(seg)]) {
			return nil
		}
		off += len(seg)
	}
	r.match = true
	return nil
}

const (
	phaseWarmup int32 = iota
	phaseMeasure
	phaseStop
)

// worker holds one goroutine's counts; only that goroutine writes them, and
// they are read after it has exited.
type worker struct {
	calls     int64
	badResp   int64
	skipped   int64 // paced slots skipped in the measured window
	errs      map[string]int64
	latencyUS []uint32
	_         [64]byte // keep workers' hot fields on separate cache lines
}

type result struct {
	Calls        int64            `json:"calls"`
	Errors       int64            `json:"errors"`
	ErrorsByCode map[string]int64 `json:"errors_by_code"`
	BadResponses int64            `json:"bad_responses"`
	CallsPerS    float64          `json:"calls_per_s"`
	P50US        float64          `json:"p50_us"`
	P99US        float64          `json:"p99_us"`
	DurationS    float64          `json:"duration_s"`
	WarmupCalls  int64            `json:"warmup_calls"`
	Conns        int              `json:"conns"`
	Concurrency  int              `json:"concurrency"`
	PayloadBytes int              `json:"payload_bytes"`
	Messages     int              `json:"stream_messages"`
	ClientMsgs   int              `json:"client_messages"`
	Pingpongs    int              `json:"pingpong"`
	TargetRate   float64          `json:"target_rate"`
	Skipped      int64            `json:"skipped_slots"`
	Method       string           `json:"method"`
	TLS          bool             `json:"tls"`
	GOMAXPROCS   int              `json:"gomaxprocs"`
}

// checkLoopback refuses any address that is not a loopback IP or localhost.
func checkLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("bad -addr %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("-addr %q: only loopback addresses (127.0.0.0/8, ::1, localhost) are allowed", addr)
	}
	return nil
}

// pacer is the schedule of a paced run: slot k is due at start + k/rate,
// and each caller, when free, claims the next slot and starts its call then.
// The slots are absolute times, so late wake-ups don't push later slots back
// (no drift), and any free caller takes a slot that another one, still in a
// call, could not. When every caller was busy and slots piled up, at most
// backlog of them (one per caller) are started late, back to back as callers
// free up; older ones are skipped and counted, so a stall is not followed by
// a burst of its missed calls.
type pacer struct {
	start    time.Time
	interval time.Duration
	backlog  int64
	next     atomic.Int64 // the index of the next unclaimed slot
}

func newPacer(start time.Time, rate float64, backlog int) *pacer {
	return &pacer{start: start, interval: max(1, time.Duration(float64(time.Second)/rate)), backlog: int64(backlog)}
}

// claim takes the next slot as of now: when it is due, and how many older
// slots were skipped to reach it.
func (p *pacer) claim(now time.Time) (due time.Time, skipped int64) {
	for {
		k := p.next.Load()
		// The oldest slot still kept: the backlog newest of those already due.
		oldest := int64(now.Sub(p.start)/p.interval) - p.backlog + 1
		if k >= oldest {
			if p.next.CompareAndSwap(k, k+1) {
				return p.slot(k), 0
			}
		} else if p.next.CompareAndSwap(k, oldest+1) {
			return p.slot(oldest), oldest - k
		}
	}
}

func (p *pacer) slot(k int64) time.Time {
	return p.start.Add(time.Duration(k) * p.interval)
}

// sleepUntil waits until t; false if stop closed first (or already was).
func sleepUntil(t time.Time, stop <-chan struct{}) bool {
	select {
	case <-stop:
		return false
	default:
	}
	d := time.Until(t)
	if d <= 0 {
		return true
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-stop:
		return false
	}
}

func percentile(sorted []uint32, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i])
}

// stream makes one server-streaming call and reads it to the end. It leaves
// resp.match true only if exactly n messages came, each matching.
func stream(ctx context.Context, cc *grpc.ClientConn, desc *grpc.StreamDesc, method string, req *[]byte, resp *response, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := cc.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	if err := s.SendMsg(req); err != nil && err != io.EOF {
		return err
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	got, ok, err := readToEnd(s, resp)
	if err != nil {
		return err
	}
	resp.match = ok && got == n
	return nil
}

// readToEnd reads a stream's responses until its status: how many came,
// whether each matched, and the status as an error unless OK.
func readToEnd(s grpc.ClientStream, resp *response) (got int, allMatched bool, err error) {
	allMatched = true
	for {
		err := s.RecvMsg(resp)
		if err == io.EOF {
			return got, allMatched, nil
		}
		if err != nil {
			return got, allMatched, err
		}
		got++
		allMatched = allMatched && resp.match
	}
}

// collect makes one client-streaming call: n messages, a half-close, and the
// one response. It leaves resp.match true only if the response matched.
func collect(ctx context.Context, cc *grpc.ClientConn, desc *grpc.StreamDesc, method string, req *[]byte, resp *response, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resp.match = false
	s, err := cc.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		if err := s.SendMsg(req); err == io.EOF {
			break // the server ended the call: RecvMsg says how
		} else if err != nil {
			return err
		}
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	// Without ServerStreams, RecvMsg also reads the status (an error unless OK).
	return s.RecvMsg(resp)
}

// pingpong makes one bidi call: n times, send a message and wait for its
// echo; then half-close and read the status. It leaves resp.match true only
// if exactly n echoes came, each matching.
func pingpong(ctx context.Context, cc *grpc.ClientConn, desc *grpc.StreamDesc, method string, req *[]byte, resp *response, n int) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s, err := cc.NewStream(ctx, desc, method)
	if err != nil {
		return err
	}
	ok := true
	for i := 0; i < n; i++ {
		if err := s.SendMsg(req); err != nil && err != io.EOF {
			return err
		}
		if err := s.RecvMsg(resp); err == io.EOF {
			resp.match = false // ended OK before all the echoes
			return nil
		} else if err != nil {
			return err
		}
		ok = ok && resp.match
	}
	if err := s.CloseSend(); err != nil {
		return err
	}
	extra, _, err := readToEnd(s, resp)
	if err != nil {
		return err
	}
	resp.match = ok && extra == 0
	return nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:50051", "server address (loopback only)")
	method := flag.String("method", "/echo.Echo/Say", "full method name: a unary echo, or with -stream-messages the streaming one")
	payload := flag.Int("payload", 0, "request size in bytes; the response must echo it (with -stream-messages: each message's size)")
	messages := flag.Int("stream-messages", 0, "0: unary calls; N > 0: server-streaming calls of N messages (request: N as 4 big-endian bytes, then the body)")
	clientMessages := flag.Int("client-messages", 0, "N > 0: client-streaming calls: N messages of the body, then the half-close; the response must be the body")
	pingpongs := flag.Int("pingpong", 0, "N > 0: bidi calls: N times send the body and wait for its echo, then half-close")
	useTLS := flag.Bool("tls", false, "connect with TLS")
	caFile := flag.String("ca", "", "with -tls: PEM file of the CA certificates to trust (default: the system's)")
	serverName := flag.String("server-name", "", "with -tls: the name to check the server's certificate against (default: the host of -addr)")
	conns := flag.Int("conns", 4, "number of connections")
	concurrency := flag.Int("concurrency", 32, "calls in flight per connection")
	duration := flag.Duration("duration", 5*time.Second, "measured window")
	warmup := flag.Duration("warmup", time.Second, "warmup before the measured window (not counted)")
	drain := flag.Duration("drain", 10*time.Second, "how long to wait for calls in flight at the end before cancelling them")
	connectTimeout := flag.Duration("connect-timeout", 10*time.Second, "how long to wait for every connection to be ready")
	sync_ := flag.Bool("sync", false, "print MEASURE_START / MEASURE_END lines around the measured window")
	maxSamples := flag.Int("max-latency-samples", 2_000_000, "latency samples kept in all (calls beyond are counted but not timed)")
	deadline := flag.Duration("deadline", 0, "0: calls without a deadline; d > 0: each call with a deadline d after it starts (grpc-timeout), as grpcio clients' timeout= sends")
	rate := flag.Float64("rate", 0, "0: closed loop (saturating); N > 0: start N calls per second in all, evenly spaced, each by whichever caller is free")
	flag.Parse()

	if err := checkLoopback(*addr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	if *conns < 1 || *concurrency < 1 || *payload < 0 || *messages < 0 || *clientMessages < 0 || *pingpongs < 0 || *duration <= 0 || *warmup < 0 || *rate < 0 {
		fmt.Fprintln(os.Stderr, "loadgen: -conns and -concurrency must be >= 1, -payload, -stream-messages, -client-messages, -pingpong and -rate >= 0, -duration > 0, -warmup >= 0")
		os.Exit(2)
	}
	if (*messages > 0 && *clientMessages > 0) || (*messages > 0 && *pingpongs > 0) || (*clientMessages > 0 && *pingpongs > 0) {
		fmt.Fprintln(os.Stderr, "loadgen: at most one of -stream-messages, -client-messages and -pingpong")
		os.Exit(2)
	}
	creds := insecure.NewCredentials()
	if *useTLS {
		var pool *x509.CertPool
		if *caFile != "" {
			pem, err := os.ReadFile(*caFile)
			if err != nil {
				fmt.Fprintln(os.Stderr, "loadgen:", err)
				os.Exit(2)
			}
			pool = x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				fmt.Fprintf(os.Stderr, "loadgen: no PEM certificate in -ca %s\n", *caFile)
				os.Exit(2)
			}
		}
		creds = credentials.NewClientTLSFromCert(pool, *serverName)
	} else if *caFile != "" || *serverName != "" {
		fmt.Fprintln(os.Stderr, "loadgen: -ca and -server-name need -tls")
		os.Exit(2)
	}

	out := bufio.NewWriter(os.Stdout)
	mark := func(s string) {
		if *sync_ {
			out.WriteString(s + "\n")
			out.Flush()
		}
	}

	// Every call runs under ctx; it is cancelled if calls are still in flight
	// -drain after the window closes, so the process always ends.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	codec := grpc.ForceCodecV2(rawCodec{})
	clients := make([]*grpc.ClientConn, *conns)
	for i := range clients {
		cc, err := grpc.NewClient(*addr,
			grpc.WithTransportCredentials(creds),
			grpc.WithDefaultCallOptions(codec),
		)
		if err != nil {
			fmt.Fprintln(os.Stderr, "loadgen: dial:", err)
			os.Exit(1)
		}
		defer cc.Close()
		clients[i] = cc
	}
	// Wait until every connection is up, so setup isn't part of the warmup.
	cctx, ccancel := context.WithTimeout(ctx, *connectTimeout)
	for _, cc := range clients {
		cc.Connect()
		for s := cc.GetState(); s != connectivity.Ready; s = cc.GetState() {
			if !cc.WaitForStateChange(cctx, s) {
				fmt.Fprintf(os.Stderr, "loadgen: connection to %s not ready after %v (state %v)\n", *addr, *connectTimeout, s)
				os.Exit(1)
			}
		}
	}
	ccancel()

	var phase atomic.Int32
	var warmupCalls atomic.Int64
	body := make([]byte, *payload)
	for i := range body {
		body[i] = byte(i)
	}
	req := body
	if *messages > 0 {
		req = binary.BigEndian.AppendUint32(make([]byte, 0, 4+len(body)), uint32(*messages))
		req = append(req, body...)
	}
	streamDesc := &grpc.StreamDesc{StreamName: "stream", ServerStreams: true}
	collectDesc := &grpc.StreamDesc{StreamName: "collect", ClientStreams: true}
	chatDesc := &grpc.StreamDesc{StreamName: "chat", ServerStreams: true, ClientStreams: true}
	n := *conns * *concurrency
	perWorkerSamples := max(1, *maxSamples/n)
	workers := make([]worker, n)
	// stopped closes with the window, waking paced callers between slots.
	stopped := make(chan struct{})
	var pace *pacer
	if *rate > 0 {
		pace = newPacer(time.Now(), *rate, n)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wk := &workers[w]
		wk.errs = map[string]int64{}
		wk.latencyUS = make([]uint32, 0, min(perWorkerSamples, 1<<16))
		cc := clients[w%*conns]
		wg.Add(1)
		go func() {
			defer wg.Done()
			var warm int64
			defer func() { warmupCalls.Add(warm) }()
			reqBuf := req
			resp := response{expect: body}
			for {
				if phase.Load() == phaseStop {
					return
				}
				if pace != nil {
					due, skipped := pace.claim(time.Now())
					if !sleepUntil(due, stopped) {
						return
					}
					if phase.Load() == phaseMeasure {
						wk.skipped += skipped
					}
				}
				t0 := time.Now()
				callCtx, callDone := ctx, context.CancelFunc(nil)
				if *deadline > 0 {
					callCtx, callDone = context.WithTimeout(ctx, *deadline)
				}
				var err error
				switch {
				case *messages > 0:
					err = stream(callCtx, cc, streamDesc, *method, &reqBuf, &resp, *messages)
				case *clientMessages > 0:
					err = collect(callCtx, cc, collectDesc, *method, &reqBuf, &resp, *clientMessages)
				case *pingpongs > 0:
					err = pingpong(callCtx, cc, chatDesc, *method, &reqBuf, &resp, *pingpongs)
				default:
					err = cc.Invoke(callCtx, *method, &reqBuf, &resp)
				}
				if callDone != nil {
					callDone()
				}
				lat := time.Since(t0)
				switch phase.Load() {
				case phaseWarmup:
					warm++
					continue
				case phaseStop:
					// Finished after the window closed: not counted.
					return
				}
				if err != nil {
					if ctx.Err() != nil && errors.Is(err, context.Canceled) {
						return
					}
					wk.errs[status.Code(err).String()]++
					continue
				}
				if !resp.match {
					wk.badResp++
					continue
				}
				wk.calls++
				if len(wk.latencyUS) < perWorkerSamples {
					wk.latencyUS = append(wk.latencyUS, uint32(min(lat.Microseconds(), math.MaxUint32)))
				}
			}
		}()
	}

	time.Sleep(*warmup)
	phase.Store(phaseMeasure)
	start := time.Now()
	mark("MEASURE_START")
	time.Sleep(*duration)
	phase.Store(phaseStop)
	close(stopped)
	elapsed := time.Since(start)
	mark("MEASURE_END")

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(*drain):
		fmt.Fprintf(os.Stderr, "loadgen: calls still in flight %v after the window; cancelling them\n", *drain)
		cancel()
		<-done
	}

	res := result{
		ErrorsByCode: map[string]int64{},
		DurationS:    elapsed.Seconds(),
		WarmupCalls:  warmupCalls.Load(),
		Conns:        *conns,
		Concurrency:  *concurrency,
		PayloadBytes: *payload,
		Messages:     *messages,
		ClientMsgs:   *clientMessages,
		Pingpongs:    *pingpongs,
		TargetRate:   *rate,
		Method:       *method,
		TLS:          *useTLS,
		GOMAXPROCS:   runtime.GOMAXPROCS(0),
	}
	var lat []uint32
	for i := range workers {
		wk := &workers[i]
		res.Calls += wk.calls
		res.BadResponses += wk.badResp
		res.Skipped += wk.skipped
		for c, k := range wk.errs {
			res.ErrorsByCode[c] += k
			res.Errors += k
		}
		lat = append(lat, wk.latencyUS...)
	}
	slices.Sort(lat)
	res.CallsPerS = float64(res.Calls) / elapsed.Seconds()
	res.P50US = percentile(lat, 0.50)
	res.P99US = percentile(lat, 0.99)

	enc := json.NewEncoder(out)
	if err := enc.Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	out.Flush()
}
