package front

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// startHealthFront starts a front with native health enabled whose Python
// stand-in fails the test on any event: health calls must never reach it.
func startHealthFront(t *testing.T, extra string) (*Front, healthpb.HealthClient) {
	t.Helper()
	f, _ := startFront(t, extra, func(_ *Front, e Event) {
		t.Errorf("a health call reached the event queue: %+v", e)
	})
	f.Health().Enable(false, HealthCheck|HealthWatch)
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", f.Port()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return f, healthpb.NewHealthClient(cc)
}

func check(t *testing.T, hc healthpb.HealthClient, service string) (healthpb.HealthCheckResponse_ServingStatus, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	return resp.GetStatus(), err
}

func TestHealthCheck(t *testing.T) {
	f, hc := startHealthFront(t, "")
	if s, err := check(t, hc, ""); err != nil || s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("overall status: %v, %v; want SERVING", s, err)
	}
	_, err := check(t, hc, "missing")
	wantStatus(t, err, codes.NotFound, "")
	if err := f.Health().Set("svc", int32(healthpb.HealthCheckResponse_NOT_SERVING)); err != nil {
		t.Fatal(err)
	}
	if s, err := check(t, hc, "svc"); err != nil || s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("svc: %v, %v; want NOT_SERVING", s, err)
	}
}

func TestHealthDisabledIsAnOrdinaryPath(t *testing.T) {
	f, _ := startFront(t, "", echo)
	if err := f.Health().Set("", 1); err == nil {
		t.Fatal("SetHealth before EnableHealth succeeded")
	}
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", f.Port()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	_, err = check(t, healthpb.NewHealthClient(cc), "")
	wantStatus(t, err, codes.Unimplemented, detailsMethodNotFound)
}

func TestHealthWatchSendsCurrentThenEachSet(t *testing.T) {
	f, hc := startHealthFront(t, "")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	next := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetStatus()
	}
	if s := next(); s != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("first message %v, want SERVICE_UNKNOWN", s)
	}
	for _, s := range []healthpb.HealthCheckResponse_ServingStatus{
		healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING,
	} {
		f.Health().Set("svc", int32(s))
		if got := next(); got != s {
			t.Fatalf("got %v, want %v", got, s)
		}
	}
	if err := f.Health().EnterShutdown(); err != nil {
		t.Fatal(err)
	}
	if s := next(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after shutdown: %v, want NOT_SERVING", s)
	}
	f.Health().Set("svc", int32(healthpb.HealthCheckResponse_SERVING)) // ignored from now on
	if s, _ := check(t, hc, "svc"); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("a set after shutdown took effect: %v", s)
	}
	if s, _ := check(t, hc, ""); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("overall status after shutdown: %v", s)
	}
}

func TestHealthWatchBacklogKeepsTheLatest(t *testing.T) {
	h := newHealthTable()
	w := h.watch("svc")
	for i := 0; i < 3*watchBacklog; i++ {
		h.set("svc", healthpb.HealthCheckResponse_ServingStatus(i%4))
	}
	got := w.take()
	if len(got) != watchBacklog {
		t.Fatalf("%d statuses queued, want %d", len(got), watchBacklog)
	}
	if last := got[len(got)-1]; last != healthpb.HealthCheckResponse_ServingStatus((3*watchBacklog-1)%4) {
		t.Fatalf("last queued %v is not the latest set", last)
	}
	h.unwatch("svc", w)
	if len(h.watchers) != 0 {
		t.Fatalf("watchers left after unwatch: %v", h.watchers)
	}
}

func TestHealthOrderedFrontDoesNotStall(t *testing.T) {
	// A health call takes an ordering ticket in the tap; it must give its
	// place up at once, or calls after a long Watch on the same connection
	// would wait for the Watch to end.
	f, _ := startFront(t, `, "ordered": true`, echo)
	f.Health().Enable(false, HealthCheck|HealthWatch)
	cc, err := grpc.NewClient(fmt.Sprintf("127.0.0.1:%d", f.Port()),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := healthpb.NewHealthClient(cc).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	in, out := []byte("after"), []byte(nil)
	if err := cc.Invoke(ctx, sayPath, &in, &out, grpc.ForceCodecV2(clientCodec{})); err != nil || string(out) != "after" {
		t.Fatalf("call after a Watch: %q, %v", out, err)
	}
}

func TestHealthWatchChangesOnly(t *testing.T) {
	f, hc := startHealthFront(t, "")
	f.Health().Enable(true, HealthCheck|HealthWatch)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{Service: "svc"})
	if err != nil {
		t.Fatal(err)
	}
	var got []healthpb.HealthCheckResponse_ServingStatus
	for len(got) < 3 {
		resp, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, resp.GetStatus())
		if len(got) == 1 {
			// A repeat of the status last sent sends nothing.
			f.Health().Set("svc", int32(healthpb.HealthCheckResponse_SERVICE_UNKNOWN))
			f.Health().Set("svc", int32(healthpb.HealthCheckResponse_SERVING))
		}
		if len(got) == 2 {
			f.Health().Set("svc", int32(healthpb.HealthCheckResponse_SERVING))
			f.Health().Set("svc", int32(healthpb.HealthCheckResponse_NOT_SERVING))
		}
	}
	want := []healthpb.HealthCheckResponse_ServingStatus{
		healthpb.HealthCheckResponse_SERVICE_UNKNOWN, healthpb.HealthCheckResponse_SERVING, healthpb.HealthCheckResponse_NOT_SERVING,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestHealthChangesOnlyWatcherKeepsTheLatest(t *testing.T) {
	h := newHealthTable()
	h.changesOnly.Store(true)
	w := h.watch("svc")
	if got := w.take(); len(got) != 1 || got[0] != healthpb.HealthCheckResponse_SERVICE_UNKNOWN {
		t.Fatalf("first take %v", got)
	}
	h.set("svc", healthpb.HealthCheckResponse_SERVING)
	h.set("svc", healthpb.HealthCheckResponse_SERVICE_UNKNOWN)
	if got := w.take(); got != nil {
		t.Fatalf("back to the status last sent, yet %v to send", got)
	}
	h.set("svc", healthpb.HealthCheckResponse_SERVING)
	h.set("svc", healthpb.HealthCheckResponse_NOT_SERVING)
	if got := w.take(); len(got) != 1 || got[0] != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("got %v, want the latest only", got)
	}
}

// A Watch stream open when a stop's grace passes ends at once with the
// status every call left gets, as on grpcio's server; it used to wait for
// the transport to close its connection (stopFlush later, with a GOAWAY's
// words).
func TestHealthWatchEndsWhenTheGracePasses(t *testing.T) {
	f, hc := startHealthFront(t, "")
	stream, err := hc.Watch(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	const grace = 200 * time.Millisecond
	begun := time.Now()
	f.BeginStop(grace)
	_, err = stream.Recv()
	took := time.Since(begun)
	wantStatus(t, err, codes.Unavailable, detailsCancellingAll)
	if took < grace || took > grace+stopFlush/2 {
		t.Fatalf("the Watch ended %v after the stop began, want about its grace %v", took, grace)
	}
}
