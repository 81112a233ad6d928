package front

import "time"

// pingPolicy polices a connection's client pings as grpc-core's server
// does: a ping sooner than the allowed interval after the last one is a
// strike, unless the server sent HEADERS, DATA or a WINDOW_UPDATE in
// between (which forgives every strike: pings among real traffic are not
// abuse), or the client sent DATA before it and the server wrote nothing
// since (forgiven once this ping is counted: grpc-core writes the ping's
// ack with a WINDOW_UPDATE for that data, and the write resets its count;
// a client uploading with keepalive pings is never policed). A strike
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
	data bool // the client sent DATA
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
	// Data the server's own write answered (the write came since the last
	// ping too) forgave with that write, as grpc-core's window update for it
	// goes with the write: it forgives nothing more here.
	if seen.data && !seen.sent && !over {
		*p = pingPolicy{}
	}
	return over
}

// pingTooSoon applies the ping policy to a ping the reader just read.
func (c *h2Conn) pingTooSoon() bool {
	seen := pingSeen{data: c.dataSincePing}
	c.dataSincePing = false
	c.w.mu.Lock()
	seen.sent = c.w.sentSincePing
	c.w.sentSincePing = false
	c.w.mu.Unlock()
	c.mu.Lock()
	seen.idle = len(c.streams) == 0
	c.mu.Unlock()
	return c.pings.received(time.Now(), seen, c.srv.limits)
}
