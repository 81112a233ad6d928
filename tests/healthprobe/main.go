// Command healthprobe is a grpc_health_probe-style client built on grpc-go's
// health stubs, for tests/test_health_native.py: it checks (or watches) a
// service and prints what it saw, one line per message.
//
//	healthprobe -addr 127.0.0.1:50051 [-service NAME] [-timeout 1s] [-watch N]
//
// Output: "status: SERVING" per response, or "error: CODE: details" when the
// call fails. Exit status: 0 when the last status seen is SERVING, 1 when it
// is another status, 2 when the call failed, 3 for bad usage.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

func main() {
	addr := flag.String("addr", "", "server address, host:port")
	service := flag.String("service", "", "service to check; empty: the whole server")
	timeout := flag.Duration("timeout", time.Second, "deadline of the call")
	watch := flag.Int("watch", 0, "watch and print this many messages instead of one Check")
	flag.Parse()
	if *addr == "" || *watch < 0 {
		flag.Usage()
		os.Exit(3)
	}
	os.Exit(run(*addr, *service, *timeout, *watch))
}

func run(addr, service string, timeout time.Duration, watch int) int {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		fmt.Printf("error: %v\n", err)
		return 2
	}
	defer cc.Close()
	client := healthpb.NewHealthClient(cc)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req := &healthpb.HealthCheckRequest{Service: service}
	if watch == 0 {
		resp, err := client.Check(ctx, req)
		if err != nil {
			return failed(err)
		}
		return seen(resp.GetStatus())
	}
	stream, err := client.Watch(ctx, req)
	if err != nil {
		return failed(err)
	}
	code := 2
	for i := 0; i < watch; i++ {
		resp, err := stream.Recv()
		if err != nil {
			return failed(err)
		}
		code = seen(resp.GetStatus())
	}
	return code
}

func seen(s healthpb.HealthCheckResponse_ServingStatus) int {
	fmt.Printf("status: %v\n", s)
	if s == healthpb.HealthCheckResponse_SERVING {
		return 0
	}
	return 1
}

func failed(err error) int {
	st := status.Convert(err)
	fmt.Printf("error: %v: %s\n", st.Code(), st.Message())
	return 2
}
