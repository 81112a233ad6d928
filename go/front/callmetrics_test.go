package front

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

func TestBucketOfIsUpperInclusive(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want int
	}{{0, 0}, {1e-6, 1}, {0.00001, 1}, {0.05, 21}, {0.051, 22}, {100, 40}, {101, 41}} {
		if got := bucketOf(LatencyBounds, c.v); got != c.want {
			t.Errorf("bucketOf(%v) = %d, want %d", c.v, got, c.want)
		}
	}
	if len(LatencyBounds) != 41 || len(SizeBounds) != 14 || SizeBounds[13] != 1<<32 {
		t.Fatal("bounds are not A66's")
	}
}

// measure runs one call through c's CallStats.
func measure(c *CallMetrics, method string, d time.Duration, in, out int, code codes.Code) {
	t0 := time.Unix(1000, 0)
	call := c.Begin(method, t0)
	c.Messages(call, false, 1, in+messageHeader)
	c.Messages(call, true, 1, out+messageHeader)
	c.End(call, t0.Add(d), code, false)
}

func TestCallMetricsNameRegisteredMethodsOnly(t *testing.T) {
	c := NewCallMetrics(false, true)
	c.RegisterMethod(sayPath)
	measure(c, sayPath, 50*time.Millisecond, 9, 2000, codes.OK)
	measure(c, "/x.Y/Z", time.Millisecond, 0, 0, codes.Unimplemented)
	measure(c, "/x.Y/W", time.Millisecond, 0, 0, codes.Unimplemented)
	// With per-call records, unregistered paths have slots (for the
	// bridge's filter), and the endpoint still writes them as "other".
	if got := fmt.Sprint(c.MethodNames()); got != "[other echo.Echo/Say x.Y/Z x.Y/W]" {
		t.Fatalf("methods %s", got)
	}
	var b bytes.Buffer
	c.WritePrometheus(&b)
	for _, want := range []string{
		`grpc_server_call_started_total{grpc_method="echo.Echo/Say"} 1`,
		`grpc_server_call_started_total{grpc_method="other"} 2`,
		`grpc_server_call_duration_seconds_bucket{grpc_method="echo.Echo/Say",grpc_status="OK",le="0.04"} 0`,
		`grpc_server_call_duration_seconds_bucket{grpc_method="echo.Echo/Say",grpc_status="OK",le="0.05"} 1`,
		`grpc_server_call_duration_seconds_sum{grpc_method="echo.Echo/Say",grpc_status="OK"} 0.05`,
		`grpc_server_call_duration_seconds_count{grpc_method="other",grpc_status="UNIMPLEMENTED"} 2`,
		`grpc_server_call_sent_total_compressed_message_size_bytes_bucket{grpc_method="echo.Echo/Say",grpc_status="OK",le="1024"} 0`,
		`grpc_server_call_sent_total_compressed_message_size_bytes_bucket{grpc_method="echo.Echo/Say",grpc_status="OK",le="2048"} 1`,
		`grpc_server_call_rcvd_total_compressed_message_size_bytes_sum{grpc_method="echo.Echo/Say",grpc_status="OK"} 9`,
		`grpc_server_call_rcvd_total_compressed_message_size_bytes_bucket{grpc_method="other",grpc_status="UNIMPLEMENTED",le="0"} 2`,
	} {
		if !strings.Contains(b.String(), want+"\n") {
			t.Errorf("missing %s in\n%s", want, b.String())
		}
	}
	recs := make([]CallRecord, 8)
	if strings.Contains(b.String(), "x.Y/") {
		t.Errorf("an unregistered method named in\n%s", b.String())
	}
	if n := c.DrainRecords(recs, 0, nil); n != 3 {
		t.Fatalf("%d records", n)
	}
	if r := recs[0]; r.Slot != 1 || r.Code != 0 || r.DurationNs != uint64(50*time.Millisecond) || r.Sent != 2000 || r.Rcvd != 9 {
		t.Fatalf("record %+v", r)
	}
}

func TestCallMetricsAllMethodsAreBounded(t *testing.T) {
	c := NewCallMetrics(true, false)
	for i := range maxNamedMethods + 10 {
		measure(c, fmt.Sprintf("/s.S/M%d", i), 0, 0, 0, codes.OK)
	}
	names := c.MethodNames()
	if len(names) != maxNamedMethods+1 || names[1] != "s.S/M0" {
		t.Fatalf("%d names", len(names))
	}
	if started := c.Started(); started[0] != 10 {
		t.Fatalf("other started %d, want 10", started[0])
	}
	// A label value is escaped.
	var b bytes.Buffer
	writeLabelValue(&b, "a\"b\\c\nd")
	if b.String() != `"a\"b\\c\nd"` {
		t.Fatal(b.String())
	}
}

func TestCallMetricsResetAndOddCodes(t *testing.T) {
	c := NewCallMetrics(false, true)
	t0 := time.Now()
	c.End(c.Begin("/a.B/C", t0), t0, codes.OK, true)
	c.End(c.Begin("/a.B/C", t0), t0, codes.DeadlineExceeded, true)
	c.End(c.Begin("/a.B/C", t0), t0, codes.Code(99), false)
	recs := make([]CallRecord, 4)
	n := c.DrainRecords(recs, 0, nil)
	got := []uint32{}
	for _, r := range recs[:n] {
		got = append(got, r.Code)
	}
	if fmt.Sprint(got) != "[1 4 2]" {
		t.Fatalf("codes %v", got)
	}
}

func TestCallRecordsDrainWaitsAndDrops(t *testing.T) {
	c := NewCallMetrics(false, true)
	go func() {
		time.Sleep(20 * time.Millisecond)
		measure(c, "/a.B/C", 0, 0, 0, codes.OK)
	}()
	recs := make([]CallRecord, 4)
	if n := c.DrainRecords(recs, 10*time.Second, nil); n != 1 {
		t.Fatalf("drained %d", n)
	}
	if n := c.DrainRecords(recs, time.Millisecond, nil); n != 0 {
		t.Fatalf("drained %d from nothing", n)
	}
	// Past the queue's bound records are dropped, and counted.
	const calls = recordShards*shardCapacity + 5
	for range calls {
		measure(c, "/a.B/C", 0, 0, 0, codes.OK)
	}
	big := make([]CallRecord, 4096)
	drained := 0
	for n := 1; n > 0; drained += n {
		n = c.DrainRecords(big, 0, nil)
	}
	if d := c.DroppedRecords(); d < 5 || drained+int(d) != calls || drained > recordShards*shardCapacity {
		t.Fatalf("dropped %d, drained %d of %d", d, drained, calls)
	}
}

func TestCallMetricsRecordWithoutAllocating(t *testing.T) {
	c := NewCallMetrics(false, true)
	c.RegisterMethod(sayPath)
	measure(c, sayPath, time.Millisecond, 1, 1, codes.OK) // makes the series
	recs := make([]CallRecord, 64)
	allocs := testing.AllocsPerRun(1000, func() {
		measure(c, sayPath, time.Millisecond, 10, 10, codes.OK)
		c.DrainRecords(recs, 0, nil)
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per call", allocs)
	}
}

// BenchmarkCallMetrics is the recording path's cost per call (Begin, two
// messages, End, with per-call records on), from parallel goroutines.
func BenchmarkCallMetrics(b *testing.B) {
	c := NewCallMetrics(false, true)
	c.RegisterMethod(sayPath)
	measure(c, sayPath, time.Millisecond, 1, 1, codes.OK)
	stop := make(chan struct{})
	go func() { // the bridge's drain
		recs := make([]CallRecord, 1024)
		for {
			select {
			case <-stop:
				return
			default:
				c.DrainRecords(recs, time.Millisecond, stop)
			}
		}
	}()
	defer close(stop)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		t0 := time.Now()
		for pb.Next() {
			call := c.Begin(sayPath, t0)
			c.Messages(call, false, 1, 100)
			c.Messages(call, true, 1, 100)
			c.End(call, t0.Add(time.Millisecond), codes.OK, false)
		}
	})
}

func TestPrometheusEndpoint(t *testing.T) {
	f := configured(t, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]], "bearer_tokens": {"s3cret": "alice"}}`, sayPath))
	port, err := f.EnableMetrics(MetricsConfig{Address: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.EnableMetrics(MetricsConfig{}); err == nil {
		t.Fatal("EnableMetrics twice")
	}
	f.CallMetrics().RegisterMethod(sayPath)
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	serveEvents(t, f, func(f *Front, e Event) {
		if string(e.Payload.Materialize()) == "missing" {
			f.Calls().Finish(e.CallID, Ending{Code: codes.NotFound}, SendWait)
			return
		}
		echo(f, e)
	})
	cc := dial(t, f)
	authed := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer s3cret")
	for range 3 {
		if _, err := say(authed, cc, "ping"); err != nil {
			t.Fatal(err)
		}
	}
	_, err = say(authed, cc, "missing")
	wantStatus(t, err, codes.NotFound, "")
	_, err = say(context.Background(), cc, "ping") // refused by the tap
	wantStatus(t, err, codes.Unauthenticated, "")
	var body string
	waitFor(t, func() bool {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		body = string(b)
		// Records are drained off the call path, so a call's end can reach
		// the endpoint after its client saw the status: wait for all five.
		for _, end := range []string{`grpc_status="OK"} 3`, `grpc_status="NOT_FOUND"} 1`, `grpc_status="UNAUTHENTICATED"} 1`} {
			if !strings.Contains(body, `grpc_server_call_duration_seconds_count{grpc_method="echo.Echo/Say",`+end) {
				return false
			}
		}
		return true
	})
	for _, want := range []string{
		`grpc_server_call_started_total{grpc_method="echo.Echo/Say"} 5`,
		`grpc_server_call_duration_seconds_count{grpc_method="echo.Echo/Say",grpc_status="NOT_FOUND"} 1`,
		`grpc_server_call_duration_seconds_count{grpc_method="echo.Echo/Say",grpc_status="UNAUTHENTICATED"} 1`,
		`grpc_server_call_rcvd_total_compressed_message_size_bytes_sum{grpc_method="echo.Echo/Say",grpc_status="OK"} 12`, // 3 x 4 bytes, without the message header,
		"pygrpc_native_connections_active 1",
		"pygrpc_native_calls_started_total 4",
		"pygrpc_native_connections_total 1",
		"# TYPE pygrpc_native_calls_active gauge",
	} {
		if !strings.Contains(body, want+"\n") {
			t.Errorf("missing %s in\n%s", want, body)
		}
	}
	f.Stop(-1)
	if _, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/metrics", port)); err == nil {
		t.Fatal("the endpoint outlived the front")
	}
}

// BenchmarkUnaryCallMetrics is a whole unary call (grpc-go client included)
// through a front answering in Go, with metrics off and on: the difference
// is what measuring costs a call (on h2: no allocation; with
// PGN_TRANSPORT=grpcgo, grpc-go's stats handler adds ~23).
func BenchmarkUnaryCallMetrics(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("metrics=%v", on), func(b *testing.B) {
			f := configured(b, fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]]}`, sayPath))
			if on {
				if _, err := f.EnableMetrics(MetricsConfig{Records: true}); err != nil {
					b.Fatal(err)
				}
				f.CallMetrics().RegisterMethod(sayPath)
			}
			if err := f.Start(); err != nil {
				b.Fatal(err)
			}
			serveEvents(b, f, echo)
			done := make(chan struct{})
			defer close(done)
			if on { // the bridge's drain, which lets records gather between batches
				go func() {
					recs := make([]CallRecord, 4096)
					for {
						select {
						case <-done:
							return
						case <-time.After(10 * time.Millisecond):
							f.DrainCallRecords(recs, 0)
						}
					}
				}()
			}
			cc := dial(b, f)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := say(context.Background(), cc, "ping"); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
