// Command ceiling serves the benchmark's echo method with the same Go front
// pygrpc-native uses, answering every call in Go: no Python at all. The gap
// between this row and the Python servers is the cost of the Python
// crossing; the gap between it and a plain grpc-go server is the front's.
//
// Methods: /echo.Echo/Say (unary, echoes the request) and /echo.Echo/Count
// (server streaming: the request is N as 4 big-endian bytes then a body, and
// the body is sent back N times), as every benchmark server serves them.
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
	profile := flag.String("cpuprofile", "", "write a CPU profile here")
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
	cfg, err := front.ParseConfig([]byte(fmt.Sprintf(`{"address": %q, "methods": [[%q, false], [%q, true]]}`,
		net.JoinHostPort(*host, fmt.Sprint(*port)), *method, *countMethod)))
	if err != nil {
		log.Fatal(err)
	}
	f, err := front.New(cfg)
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Start(); err != nil {
		log.Fatal(err)
	}
	events, calls := f.Events(), f.Calls()
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
					if e.Kind != front.EventCall {
						continue
					}
					if e.MethodID == 0 {
						// The request's buffers become the reply's.
						calls.Respond(e.CallID, e.Payload, true)
						continue
					}
					count(calls, e)
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

// count answers a /echo.Echo/Count call as the Python servers do: the body
// N times, the last one with the status. Sends block while the call's queue
// is full, as send_message does in Python.
func count(calls *front.Calls, e front.Event) {
	req := e.Bytes()
	e.Release()
	if len(req) < 4 {
		calls.Finish(e.CallID, front.Ending{Code: codes.InvalidArgument, Details: "the request must start with a 4-byte count"}, true)
		return
	}
	n := int(binary.BigEndian.Uint32(req))
	body := mem.BufferSlice{mem.SliceBuffer(req[4:])}
	for i := 0; i < n-1; i++ {
		if calls.Send(e.CallID, body, true) != front.ResultOK {
			return
		}
	}
	if n > 0 {
		calls.Respond(e.CallID, body, true)
	} else {
		calls.Finish(e.CallID, front.Ending{Code: codes.OK}, true)
	}
}
