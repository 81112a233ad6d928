package front

import (
	"crypto/rand"
	"crypto/tls"
	"sync"
	"time"
)

// Session ticket keys of a TLS port's configurations. Each configuration
// the port installs gets keys of its own, so a rotation ends resumption
// of the sessions before it (grpcio's new configuration does the same).
// Keys set explicitly are not rotated by crypto/tls, so they are rotated
// here as crypto/tls rotates its automatic ones: a new key every day,
// tickets accepted for a week.

const (
	ticketKeyRotation = 24 * time.Hour
	ticketKeyLifetime = 7 * 24 * time.Hour
)

type sessionTickets struct {
	mu      sync.Mutex
	keys    [][32]byte // newest first; the first encrypts new tickets
	created time.Time  // of keys[0]
}

// renew gives cfg fresh keys, dropping the previous configuration's.
func (t *sessionTickets) renew(cfg *tls.Config) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.keys = [][32]byte{newTicketKey()}
	t.created = time.Now()
	cfg.SetSessionTicketKeys(t.keys)
}

// rotate adds a new key to cfg's when the newest is a day old, keeping
// the keys of the last week to read the tickets they encrypted.
func (t *sessionTickets) rotate(cfg *tls.Config) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if time.Since(t.created) < ticketKeyRotation {
		return
	}
	keep := int(ticketKeyLifetime / ticketKeyRotation)
	t.keys = append([][32]byte{newTicketKey()}, t.keys...)
	if len(t.keys) > keep {
		t.keys = t.keys[:keep]
	}
	t.created = time.Now()
	cfg.SetSessionTicketKeys(t.keys)
}

func newTicketKey() [32]byte {
	var k [32]byte
	_, _ = rand.Read(k[:]) // crypto/rand.Read never fails (Go 1.24+)
	return k
}
