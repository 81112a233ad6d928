package front

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

func TestParseBindAddress(t *testing.T) {
	for _, c := range []struct{ in, network, address, path string }{
		{"127.0.0.1:0", "tcp", "127.0.0.1:0", ""},
		{"[::]:50051", "tcp", "[::]:50051", ""},
		{"localhost:1", "tcp", "localhost:1", ""},
		{"unix:rel/s.sock", "unix", "rel/s.sock", "rel/s.sock"},
		{"unix:/abs/s.sock", "unix", "/abs/s.sock", "/abs/s.sock"},
		{"unix:///abs/s.sock", "unix", "/abs/s.sock", "/abs/s.sock"},
		{"unix-abstract:name", "unix", "@name", ""},
		// grpc-core's forms: the port 443 when none is given, a number
		// with white space around it or a "+", a bare IPv6 address.
		{"127.0.0.1", "tcp", "127.0.0.1:443", ""},
		{"127.0.0.1:", "tcp", "127.0.0.1:443", ""},
		{"localhost", "tcp", "localhost:443", ""},
		{"[::1]", "tcp", "[::1]:443", ""},
		{"[::1]:", "tcp", "[::1]:443", ""},
		{"::1", "tcp", "[::1]:443", ""},
		{"127.0.0.1:0 ", "tcp", "127.0.0.1:0", ""},
		{"localhost:\t+8080\n", "tcp", "localhost:8080", ""},
		{"127.0.0.1:http", "tcp", "127.0.0.1:http", ""},
		{"127.0.0.1:0x10", "tcp", "127.0.0.1:0x10", ""},
		{":50051", "tcp", ":50051", ""},
	} {
		got, err := parseBindAddress(c.in)
		if err != nil || got.network != c.network || got.address != c.address || got.path != c.path {
			t.Errorf("%q: got %+v, %v", c.in, got, err)
		}
	}
	for _, bad := range []string{"unix://relative", ":", "", "[::1", "[::1]x"} {
		if _, err := parseBindAddress(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// newBoundFront is a front that has bound each address, plaintext or with
// its TLS configuration, and answers every call with its peer's security.
func newBoundFront(t *testing.T, extra string, listeners ...struct {
	addr string
	tls  *PortSecurity
}) (*Front, []int) {
	t.Helper()
	cfg, err := ParseConfig([]byte(fmt.Sprintf(`{"address": "127.0.0.1:0", "methods": [[%q, false]]%s}`, sayPath, extra)))
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var ports []int
	for _, l := range listeners {
		if err := f.SetTLS(l.tls); err != nil {
			t.Fatal(err)
		}
		port, err := f.Bind(l.addr)
		if err != nil {
			t.Fatal(err)
		}
		ports = append(ports, port)
	}
	if err := f.Start(); err != nil {
		t.Fatal(err)
	}
	answerWithDetails(t, f, func(d CallDetails) []byte {
		security := "insecure"
		if d.Security.TLS {
			security = "ssl"
		}
		return []byte(d.Peer + " " + security)
	})
	return f, ports
}

func callTarget(t *testing.T, target string, creds credentials.TransportCredentials) (string, error) {
	t.Helper()
	cc, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(clientCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return say(ctx, cc, "hi")
}

func TestSeveralListenersEachWithItsOwnSecurity(t *testing.T) {
	p := newTestPKI(t)
	serverTLS, err := ParseTLS([]byte(tlsDoc(p.server.key, p.server.cert, nil, false)))
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s.sock")
	type l = struct {
		addr string
		tls  *PortSecurity
	}
	_, ports := newBoundFront(t, "", l{"127.0.0.1:0", nil}, l{"127.0.0.1:0", serverTLS}, l{"unix:" + sock, nil})
	if ports[2] != 1 {
		t.Errorf("a Unix socket's port is %d, want 1 as grpcio", ports[2])
	}
	plain := insecure.NewCredentials()
	secure := credentials.NewTLS(clientTLS(p, nil))
	for _, c := range []struct {
		target string
		creds  credentials.TransportCredentials
		want   string
	}{
		{fmt.Sprintf("127.0.0.1:%d", ports[0]), plain, "insecure"},
		{fmt.Sprintf("127.0.0.1:%d", ports[1]), secure, "ssl"},
		{"unix://" + sock, plain, "insecure"},
	} {
		got, err := callTarget(t, c.target, c.creds)
		if err != nil {
			t.Fatalf("%s: %v", c.target, err)
		}
		if _, security, _ := cut(got); security != c.want {
			t.Errorf("%s: %q, want security %q", c.target, got, c.want)
		}
	}
	if _, err := callTarget(t, fmt.Sprintf("127.0.0.1:%d", ports[1]), plain); err == nil {
		t.Error("a plaintext client was served on the TLS port")
	}
	if got, _ := callTarget(t, "unix://"+sock, plain); got != "unix: insecure" {
		t.Errorf("peer on a Unix socket: %q, want grpcio's \"unix: insecure\"", got)
	}
}

func cut(s string) (string, string, bool) {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == ' ' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func TestStaleSocketFileIsReplacedAndRemovedAtStop(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "s.sock")
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	f, _ := newBoundFront(t, "", struct {
		addr string
		tls  *PortSecurity
	}{"unix:" + sock, nil})
	if _, err := callTarget(t, "unix://"+sock, insecure.NewCredentials()); err != nil {
		t.Fatal(err)
	}
	f.Stop(-1)
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket file is still there after Stop: %v", err)
	}
}

func TestConnectionLimitClosesExtraConnections(t *testing.T) {
	_, ports := newBoundFront(t, `, "options": [["grpc.max_allowed_incoming_connections", 1]]`, struct {
		addr string
		tls  *PortSecurity
	}{"127.0.0.1:0", nil})
	target := fmt.Sprintf("127.0.0.1:%d", ports[0])
	first, err := grpc.NewClient(target, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithDefaultCallOptions(grpc.ForceCodecV2(clientCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if _, err := say(ctx, first, "hi"); err != nil {
		t.Fatal(err)
	}
	if _, err := callTarget(t, target, insecure.NewCredentials()); err == nil {
		t.Error("a second connection was served over the limit of 1")
	}
}

// A host name is bound on every address it stands for, as grpc-core binds
// it; addresses that name no host are bound as given.
func TestHostAddresses(t *testing.T) {
	for _, c := range []struct {
		address string
		hosts   []string
		port    string
	}{
		{"localhost:5", []string{"127.0.0.1", "::1"}, "5"},
		{"LocalHost:0", []string{"127.0.0.1", "::1"}, "0"},
		{"localhost", []string{"127.0.0.1", "::1"}, defaultPort},
		{"127.0.0.1:0", nil, ""},
		{"[::1]:0", nil, ""},
		{"[::]:0", nil, ""},
		{":0", nil, ""},
		{"unix:localhost", nil, ""},
		{"unix-abstract:localhost", nil, ""},
		{"no-such-host.invalid:0", nil, ""},
	} {
		hosts, port := hostAddresses(c.address)
		if !slices.Equal(hosts, c.hosts) || port != c.port {
			t.Errorf("%q: %v %q, want %v %q", c.address, hosts, port, c.hosts, c.port)
		}
	}
}
