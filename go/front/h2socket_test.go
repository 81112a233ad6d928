package front

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestH2SocketKeepsOrderForASlowPeer: what the kernel can't take at once
// waits, in order, whether the writer gave its buffer up (writeTaking,
// large and small remainders) or had it copied (Write), and the peer gets
// every byte once it reads; the listener's counter counts them all (drain's
// writev included).
func TestH2SocketKeepsOrderForASlowPeer(t *testing.T) {
	peer, server := tcpPair(t)
	// Small socket buffers, so that most of it waits in the socket's own.
	_ = peer.(*net.TCPConn).SetReadBuffer(64 << 10)
	_ = server.(*net.TCPConn).SetWriteBuffer(64 << 10)
	m := new(metrics)
	s := newH2Socket(&conn{Conn: server, m: m, open: new(openConns)})
	defer s.Close()

	var want bytes.Buffer
	sizes := []int{3 << 20, 100, 1 << 20, 40 << 10, 7, 5 << 20, 1}
	for i, n := range sizes {
		b := bytes.Repeat([]byte{byte('a' + i)}, n)
		want.Write(b)
		if i%2 == 0 {
			if _, err := s.writeTaking(append(getWriteBuf(), b...)); err != nil {
				t.Fatal(err)
			}
		} else if _, err := s.Write(b); err != nil {
			t.Fatal(err)
		}
		// The writer reuses what it wasn't asked to give up.
		clear(b)
	}
	s.mu.Lock()
	waiting := s.pendingLen
	s.mu.Unlock()
	if waiting < 4<<20 {
		t.Fatalf("only %d bytes waited for the peer; the test needs megabytes", waiting)
	}
	got := make([]byte, want.Len())
	_ = peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatalf("read %v", err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the peer got the bytes out of order or changed")
	}
	s.waitWritten(time.Second)
	if n := m.bytesOut.Load(); n != uint64(want.Len()) {
		t.Fatalf("counted %d bytes out, wrote %d", n, want.Len())
	}
}

// TestH2SocketFailsWritesAfterThePeerIsGone: once a write has failed (the
// peer closed while data waited), later writes report the error at once
// and nothing waits.
func TestH2SocketFailsWritesAfterThePeerIsGone(t *testing.T) {
	peer, server := tcpPair(t)
	s := newH2Socket(&conn{Conn: server, m: new(metrics), open: new(openConns)})
	defer s.Close()
	if _, err := s.writeTaking(make([]byte, 8<<20)); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Write([]byte("x"))
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("writes still succeed after the peer closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pendingLen != 0 || len(s.pending) != 0 {
		t.Fatalf("%d bytes in %d buffers still wait after the error", s.pendingLen, len(s.pending))
	}
}

// tcpPair is a connected pair of loopback TCP sockets: the client's end and
// the server's, both closed when the test ends.
func tcpPair(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}
