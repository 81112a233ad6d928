// Command ceiling serves the benchmark's echo method with the same Go front
// pygrpc-native uses, answering every call in Go: no Python at all. The gap
// between this row and the Python servers is the cost of the Python
// crossing; the gap between it and a plain grpc-go server is the front's.
//
// Methods: /echo.Echo/Say (unary, echoes the request), /echo.Echo/Count
// (server streaming: the request is N as 4 big-endian bytes then a body, and
// the body is sent back N times), /echo.Echo/Collect (client streaming: the
// last request message comes back) and /echo.Echo/Chat (bidi: every message
// comes back as it arrives), as every benchmark server serves them. The two
// request-streaming methods read by credit, as the low-level Python server
// does (bench/servers/lowlevel.py): Collect keeps a window of collectWindow
// messages granted (RequestMessages), topped up by half, and responds with
// the last message at the half-close (EventHalfClose); Chat grants one
// message at a time, sends each back, and finishes at the half-close.
//
//	ceiling -host 127.0.0.1 -port 0 [-responders 1] [-cpuprofile f]
//
// It prints "PORT <n>" when ready and stops on SIGTERM or SIGINT.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"sync"
	"syscall"

	"github.com/pygrpc-native/pygrpc-native/go/front"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
)

func main() {
	host := flag.String("host", "127.0.0.1", "loopback address to listen on")
	port := flag.Int("port", 0, "port (0: pick a free one)")
	responders := flag.Int("responders", 1, "goroutines taking events, as Python threads would")
	method := flag.String("method", "/echo.Echo/Say", "the unary echo method")
	countMethod := flag.String("count-method", "/echo.Echo/Count", "the server-streaming method")
	collectMethod := flag.String("collect-method", "/echo.Echo/Collect", "the client-streaming method")
	chatMethod := flag.String("chat-method", "/echo.Echo/Chat", "the bidi method")
	profile := flag.String("cpuprofile", "", "write a CPU profile here")
	metrics := flag.Bool("metrics", false, "gRFC A66 metrics on, with a Prometheus endpoint on a free loopback port")
	flag.Parse()
	if ip := net.ParseIP(*host); ip == nil || !ip.IsLoopback() {
		log.Fatalf("refusing to listen on %q: the benchmarks use loopback addresses only", *host)
	}
	if *profile != "" {
		out, err := os.Create(*profile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(out)
		defer pprof.StopCPUProfile()
	}
	// Method ids are the positions in "methods": methodSay, methodCount, ...
	cfg, err := front.ParseConfig([]byte(fmt.Sprintf(
		`{"address": %q, "methods": [[%q, false], [%q, true], [%q, false, true], [%q, true, true]]}`,
		net.JoinHostPort(*host, fmt.Sprint(*port)), *method, *countMethod, *collectMethod, *chatMethod)))
	if err != nil {
		log.Fatal(err)
	}
	f, err := front.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if *metrics {
		if _, err := f.EnableMetrics(front.MetricsConfig{Address: net.JoinHostPort(*host, "0")}); err != nil {
			log.Fatal(err)
		}
		for _, path := range []string{*method, *countMethod, *collectMethod, *chatMethod} {
			f.CallMetrics().RegisterMethod(path)
		}
	}
	if err := f.Start(); err != nil {
		log.Fatal(err)
	}
	events, calls := f.Events(), f.Calls()
	collecting := newCollects()
	done := make(chan struct{})
	for i := 0; i < *responders; i++ {
		go func() {
			for {
				batch, closed := events.Recv(256, 1<<20, -1)
				if closed {
					done <- struct{}{}
					return
				}
				for _, e := range batch {
					switch e.Kind {
					case front.EventCall:
						switch e.MethodID {
						case methodSay:
							// The request's buffers become the reply's.
							calls.Respond(e.CallID, e.Payload, front.SendWait)
						case methodCount:
							count(calls, e)
						case methodCollect:
							e.Release()
							collecting.start(calls, e.CallID)
						default: // methodChat
							e.Release()
							calls.RequestMessages(e.CallID, 1)
						}
					case front.EventMessage:
						if e.MethodID == methodChat {
							// The message's buffers become the echo's.
							if calls.Send(e.CallID, e.Payload, front.SendWait) == front.ResultOK {
								calls.RequestMessages(e.CallID, 1)
							}
							continue
						}
						collecting.message(calls, e)
					case front.EventHalfClose:
						if e.MethodID == methodChat {
							calls.Finish(e.CallID, front.Ending{Code: codes.OK}, front.SendWait)
							continue
						}
						collecting.halfClose(calls, e.CallID)
					case front.EventCancel:
						collecting.drop(e.CallID)
					}
				}
			}
		}()
	}
	fmt.Printf("PORT %d\n", f.Port())
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	f.Stop(-1)
	for i := 0; i < *responders; i++ {
		<-done
	}
}

// The method ids: positions in the config's "methods".
const (
	methodSay int32 = iota
	methodCount
	methodCollect
	methodChat
)

// collectWindow is how many request messages a Collect call has granted
// ahead; it is topped up when half of it is used.
const collectWindow = 32

// collect is a Collect call's state: the last message (its buffers, owned
// here until they are replied or replaced) and the credits left.
type collect struct {
	last    mem.BufferSlice
	credits int
}

// collects holds the Collect calls in progress, shared by the responders
// (one by default; with more, events of one call may be taken by different
// goroutines, so a reply could miss the latest message, as in the Python
// server).
type collects struct {
	mu    sync.Mutex
	calls map[uint64]*collect
}

// granted reports whether a grant of credit reached a live call.
func granted(r front.Result, err error) bool { return err == nil && r == front.ResultOK }

func newCollects() *collects { return &collects{calls: map[uint64]*collect{}} }

func (cs *collects) start(calls *front.Calls, id uint64) {
	cs.mu.Lock()
	cs.calls[id] = &collect{credits: collectWindow}
	cs.mu.Unlock()
	if !granted(calls.RequestMessages(id, collectWindow)) {
		cs.drop(id)
	}
}

func (cs *collects) message(calls *front.Calls, e front.Event) {
	cs.mu.Lock()
	c := cs.calls[e.CallID]
	if c == nil {
		cs.mu.Unlock()
		e.Release()
		return
	}
	c.last.Free()
	c.last = e.Payload
	c.credits--
	grant := 0
	if c.credits <= collectWindow/2 {
		grant = collectWindow - c.credits
		c.credits = collectWindow
	}
	cs.mu.Unlock()
	if grant > 0 && !granted(calls.RequestMessages(e.CallID, grant)) {
		cs.drop(e.CallID)
	}
}

func (cs *collects) halfClose(calls *front.Calls, id uint64) {
	cs.mu.Lock()
	c := cs.calls[id]
	delete(cs.calls, id)
	cs.mu.Unlock()
	if c != nil {
		// The last message's buffers become the reply's (nil: an empty reply).
		calls.Respond(id, c.last, front.SendWait)
	}
}

func (cs *collects) drop(id uint64) {
	cs.mu.Lock()
	c := cs.calls[id]
	delete(cs.calls, id)
	cs.mu.Unlock()
	if c != nil {
		c.last.Free()
	}
}

// count answers a /echo.Echo/Count call as the Python servers do: the body
// N times, the last one with the status. Sends block while the call's queue
// is full, as send_message does in Python.
func count(calls *front.Calls, e front.Event) {
	req := e.Bytes()
	e.Release()
	if len(req) < 4 {
		calls.Finish(e.CallID, front.Ending{Code: codes.InvalidArgument, Details: "the request must start with a 4-byte count"}, front.SendWait)
		return
	}
	n := int(binary.BigEndian.Uint32(req))
	body := mem.BufferSlice{mem.SliceBuffer(req[4:])}
	for i := 0; i < n-1; i++ {
		if calls.Send(e.CallID, body, front.SendWait) != front.ResultOK {
			return
		}
	}
	if n > 0 {
		calls.Respond(e.CallID, body, front.SendWait)
	} else {
		calls.Finish(e.CallID, front.Ending{Code: codes.OK}, front.SendWait)
	}
}
