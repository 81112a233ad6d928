package front

import (
	"testing"
	"time"
)

// The policy's rules, step by step, as grpc-core's ping abuse policy
// counts them (the wire behaviour is compared with grpcio's server in
// tests/test_diff_connections.py).
func TestPingPolicyCountsStrikesAsGrpcCore(t *testing.T) {
	l := defaultLimits()
	t0 := time.Unix(1000, 0)
	type ping struct {
		after            time.Duration // since t0
		sent, idle, owed bool          // see pingSeen
		over             bool          // the strikes are past the limit
	}
	for _, c := range []struct {
		name   string
		limits func(*Limits)
		pings  []ping
	}{
		{"idle: the third early ping is one too many", nil, []ping{{0, false, true, false, false}, {time.Second, false, true, false, false}, {2 * time.Second, false, true, false, false}, {3 * time.Second, false, true, false, true}}},
		{"busy: 5 minutes apart are no strikes", nil, []ping{{0, false, false, false, false}, {5 * time.Minute, false, false, false, false}, {10 * time.Minute, false, false, false, false}, {15 * time.Minute, false, false, false, false}}},
		{"idle: 5 minutes apart are still early", nil, []ping{{0, false, true, false, false}, {5 * time.Minute, false, true, false, false}, {10 * time.Minute, false, true, false, false}, {15 * time.Minute, false, true, false, true}}},
		{"a write forgives", nil, []ping{{0, false, true, false, false}, {time.Second, false, true, false, false}, {2 * time.Second, false, true, false, false}, {3 * time.Second, true, true, false, false}, {4 * time.Second, false, true, false, false}, {5 * time.Second, false, true, false, false}, {6 * time.Second, false, true, false, true}}},
		{"an owed window update forgives once the ping is counted", nil, []ping{{0, false, false, false, false}, {time.Second, false, false, false, false}, {2 * time.Second, false, false, true, false}, {3 * time.Second, false, false, false, false}, {4 * time.Second, false, false, false, false}, {5 * time.Second, false, false, false, false}, {6 * time.Second, false, false, false, true}}},
		{"an owed window update doesn't forgive the ping that crosses the limit", nil, []ping{{0, false, false, false, false}, {time.Second, false, false, false, false}, {2 * time.Second, false, false, false, false}, {3 * time.Second, false, false, true, true}}},
		{"a call answered, then idle pings: the answer carried the update its request was owed", nil, []ping{{0, true, true, false, false}, {time.Second, false, true, false, false}, {2 * time.Second, false, true, false, false}, {3 * time.Second, false, true, false, true}}},
		{"an upload between keepalive pings is never policed", nil, []ping{{0, false, false, true, false}, {time.Second, false, false, true, false}, {2 * time.Second, false, false, true, false}, {3 * time.Second, false, false, true, false}, {4 * time.Second, false, false, true, false}}},
		{"no limit", func(l *Limits) { l.PingStrikes = 0 }, []ping{{0, false, true, false, false}, {1, false, true, false, false}, {2, false, true, false, false}, {3, false, true, false, false}, {4, false, true, false, false}}},
		{"permitted without calls", func(l *Limits) { l.KeepalivePermitNoCalls = true; l.PingMinInterval = time.Second }, []ping{{0, false, true, false, false}, {time.Second, false, true, false, false}, {2 * time.Second, false, true, false, false}, {3 * time.Second, false, true, false, false}}},
	} {
		lim := l
		if c.limits != nil {
			c.limits(&lim)
		}
		var p pingPolicy
		for i, pg := range c.pings {
			if got := p.received(t0.Add(pg.after), pingSeen{sent: pg.sent, idle: pg.idle, owed: pg.owed}, &lim); got != pg.over {
				t.Errorf("%s: ping %d: over the limit %v, want %v", c.name, i, got, pg.over)
			}
		}
	}
}

func TestPingOptionsParse(t *testing.T) {
	cfg, err := ParseConfig([]byte(`{"address": "127.0.0.1:0", "options": [["grpc.http2.min_ping_interval_without_data_ms", 1500], ["grpc.http2.max_ping_strikes", -3]]}`))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Limits.PingMinInterval != 1500*time.Millisecond || cfg.Limits.PingStrikes != 0 {
		t.Fatalf("got %v, %d strikes", cfg.Limits.PingMinInterval, cfg.Limits.PingStrikes)
	}
	if d := defaultLimits(); d.PingMinInterval != 5*time.Minute || d.PingStrikes != 2 {
		t.Fatalf("defaults %v, %d strikes", d.PingMinInterval, d.PingStrikes)
	}
}
