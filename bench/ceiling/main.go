// Command ceiling serves the benchmark's echo method with the same Go front
// pygrpc-native uses, answering every call in Go: no Python at all. The gap
// between this row and the Python servers is the cost of the Python
// crossing; the gap between it and a plain grpc-go server is the front's.
//
//	ceiling -host 127.0.0.1 -port 0 [-responders 1] [-cpuprofile f]
//
// It prints "PORT <n>" when ready and stops on SIGTERM or SIGINT.
package main

import (
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"syscall"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

func main() {
	host := flag.String("host", "127.0.0.1", "loopback address to listen on")
	port := flag.Int("port", 0, "port (0: pick a free one)")
	responders := flag.Int("responders", 1, "goroutines taking events, as Python threads would")
	method := flag.String("method", "/echo.Echo/Say", "the echo method")
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
	cfg, err := front.ParseConfig([]byte(fmt.Sprintf(`{"address": %q, "methods": [[%q, false]]}`,
		net.JoinHostPort(*host, fmt.Sprint(*port)), *method)))
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
	done := make(chan struct{})
	for i := 0; i < *responders; i++ {
		go func() {
			for {
				batch, closed := f.Recv(256, -1)
				if closed {
					done <- struct{}{}
					return
				}
				for _, e := range batch {
					if e.Kind == front.EventCall {
						f.Respond(e.CallID, e.Payload, true)
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
