package front

import (
	"golang.org/x/sys/unix"
)

// notifier is a pipe that is readable exactly while its queue holds events
// (or is closed), so an event loop can watch the read end and take events
// on its own thread, with no thread of ours in between. The queue writes a
// byte when it goes from empty to non-empty and reads it back when a take
// empties it, both under the queue's lock, so the byte and the events never
// disagree.
type notifier struct {
	r, w int
}

func newNotifier() (*notifier, error) {
	var fds [2]int
	if err := unix.Pipe(fds[:]); err != nil {
		return nil, err
	}
	for _, fd := range fds {
		unix.CloseOnExec(fd)
		if err := unix.SetNonblock(fd, true); err != nil {
			unix.Close(fds[0])
			unix.Close(fds[1])
			return nil, err
		}
	}
	return &notifier{r: fds[0], w: fds[1]}, nil
}

var oneByte = []byte{1}

// raise and lower are raw system calls (see rawWrite): the pipe is
// non-blocking.
func (n *notifier) raise() { _, _ = rawWrite(uintptr(n.w), oneByte) }

func (n *notifier) lower() {
	var b [8]byte
	_, _ = rawReadFD(uintptr(n.r), b[:])
}

func (n *notifier) close() {
	unix.Close(n.r)
	unix.Close(n.w)
}
