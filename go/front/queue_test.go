package front

import (
	"math"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestQueueRecvTimeoutAndClose(t *testing.T) {
	q := newEventQueue()
	start := time.Now()
	if b, closed := q.recv(10, math.MaxInt, 20*time.Millisecond); b != nil || closed {
		t.Fatalf("empty queue: %v %v", b, closed)
	}
	if time.Since(start) < 20*time.Millisecond {
		t.Fatal("recv returned before its timeout")
	}
	for i := 0; i < 5; i++ {
		q.push(Event{CallID: uint64(i)})
	}
	q.close()
	if b, _ := q.recv(3, math.MaxInt, -1); len(b) != 3 || b[0].CallID != 0 {
		t.Fatalf("first batch %v", b)
	}
	if b, closed := q.recv(10, math.MaxInt, -1); len(b) != 2 || closed {
		t.Fatalf("second batch %v %v", b, closed)
	}
	if _, closed := q.recv(10, math.MaxInt, -1); !closed {
		t.Fatal("drained closed queue must report closed")
	}
	if q.push(Event{}) {
		t.Fatal("push after close must fail")
	}
}

func TestQueueWakesManyConsumers(t *testing.T) {
	q := newEventQueue()
	got := make(chan int, 4)
	for i := 0; i < 4; i++ {
		go func() { b, _ := q.recv(1, math.MaxInt, -1); got <- len(b) }()
	}
	time.Sleep(10 * time.Millisecond)
	q.pushAll([]Event{{}, {}, {}, {}})
	for i := 0; i < 4; i++ {
		select {
		case n := <-got:
			if n != 1 {
				t.Fatalf("batch of %d", n)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("a consumer was not woken")
		}
	}
}

func TestFormatPeer(t *testing.T) {
	for addr, want := range map[net.Addr]string{
		&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 5}:       "ipv4:127.0.0.1:5",
		&net.TCPAddr{IP: net.ParseIP("::ffff:10.0.0.1"), Port: 6}: "ipv4:10.0.0.1:6",
		&net.TCPAddr{IP: net.ParseIP("::1"), Port: 7}:             "ipv6:%5B::1%5D:7",
	} {
		if got := formatPeer(addr); got != want {
			t.Errorf("%v: %q, want %q", addr, got, want)
		}
	}
}

func TestNotifierIsReadableExactlyWhileEventsWait(t *testing.T) {
	q := newEventQueue()
	n, err := q.notifier()
	if err != nil {
		t.Fatal(err)
	}
	readable := func() bool {
		fds := []unix.PollFd{{Fd: int32(n.r), Events: unix.POLLIN}}
		c, _ := unix.Poll(fds, 0)
		return c == 1
	}
	if readable() {
		t.Fatal("readable while empty")
	}
	q.push(Event{})
	q.push(Event{})
	if !readable() {
		t.Fatal("not readable with events")
	}
	q.take(1, math.MaxInt)
	if !readable() {
		t.Fatal("not readable with one event left")
	}
	q.take(1, math.MaxInt)
	if readable() {
		t.Fatal("readable once drained")
	}
	q.close()
	if !readable() {
		t.Fatal("a closed queue must read as ready")
	}
}

func TestCopyMessageReusesDirtyBuffers(t *testing.T) {
	src := make([]byte, 5000)
	for i := range src {
		src[i] = byte(i)
	}
	m := CopyMessage(src)
	if got := m.Materialize(); string(got) != string(src) {
		t.Fatal("copy differs")
	}
	m.Free()
	small := CopyMessage([]byte("abc"))
	if string(small.Materialize()) != "abc" {
		t.Fatal("small copy differs")
	}
	if empty := CopyMessage(nil); empty.Len() != 0 {
		t.Fatal("empty message has bytes")
	}
}
