package front

import "time"

// pingPolicy polices a connection's client pings as grpc-core's server
// does: a ping sooner than the allowed interval after the last one is a
// strike, unless the server sent HEADERS, DATA or a WINDOW_UPDATE in
// between (which forgives every strike: pings among real traffic are not
// abuse), or grpc-core would owe the client a WINDOW_UPDATE as the ping
// arrives (h2Writer.windowOwed: the client sent DATA, or a call of a stream
// it keeps open awaits a message, and nothing was written since): that
// update goes with the ping's ack, and the write forgives once this ping
// is counted (a client uploading with keepalive pings is never policed;
// one pinging beside a call awaiting its first message has a ping more). A strike
// past Limits.PingStrikes (0: no limit) ends the connection with GOAWAY
// ENHANCE_YOUR_CALM "too_many_pings", after the ping's ack. The interval
// is Limits.PingMinInterval, or two hours on a connection without calls
// unless grpc.keepalive_permit_without_calls (the TCP keepalive floor
// grpc-core applies there). Reader only.
type pingPolicy struct {
	last    time.Time // the last ping's arrival; zero: none since a reset
	strikes int
}

// idlePingInterval is the interval between pings on a connection without
// calls, unless the server permits keepalive without calls.
const idlePingInterval = 2 * time.Hour

// pingSeen is what happened on a connection since its last ping.
type pingSeen struct {
	sent bool // the server wrote headers, data or a window update
	owed bool // this ping's ack carries a window update (h2Writer.windowOwed)
	idle bool // the connection has no calls (as the ping arrives)
}

// received counts a ping that arrived at now. True when the strikes are
// past the limit.
func (p *pingPolicy) received(now time.Time, seen pingSeen, l *Limits) bool {
	if seen.sent {
		*p = pingPolicy{}
	}
	interval := l.PingMinInterval
	if seen.idle && !l.KeepalivePermitNoCalls {
		interval = idlePingInterval
	}
	early := !p.last.IsZero() && now.Before(p.last.Add(interval))
	p.last = now
	if early {
		p.strikes++
	}
	over := early && l.PingStrikes != 0 && p.strikes > l.PingStrikes
	if seen.owed && !over {
		*p = pingPolicy{}
	}
	return over
}

// pingTooSoon applies the ping policy to a ping the reader just read.
// Before its ack is queued: the ack carries what is owed.
func (c *h2Conn) pingTooSoon() bool {
	var seen pingSeen
	c.w.mu.Lock()
	seen.sent = c.w.sentSincePing
	c.w.sentSincePing = false
	owed := c.w.windowOwed.Swap(false)
	c.w.mu.Unlock()
	c.mu.Lock()
	seen.idle = len(c.streams) == 0
	// grpc-core owes no update to a stream the client reset.
	seen.owed = owed && len(c.streams) > len(c.peerRST)
	c.mu.Unlock()
	return c.pings.received(time.Now(), seen, c.srv.limits)
}
