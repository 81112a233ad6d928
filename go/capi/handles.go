package main

import (
	"sync"
	"sync/atomic"

	"github.com/pygrpc-native/pygrpc-native/go/front"
)

// handles maps the integers C holds to fronts. Lookups happen on every
// call, so the map is copied on write and read without a lock.
var handles struct {
	mu   sync.Mutex // serializes writers
	next int64
	m    atomic.Pointer[map[int64]*front.Front]
}

func addHandle(f *front.Front) int64 {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	handles.next++
	h := handles.next
	old := handles.m.Load()
	m := make(map[int64]*front.Front, 1)
	if old != nil {
		for k, v := range *old {
			m[k] = v
		}
	}
	m[h] = f
	handles.m.Store(&m)
	return h
}

func getHandle(h int64) *front.Front {
	m := handles.m.Load()
	if m == nil {
		return nil
	}
	return (*m)[h]
}

func removeHandle(h int64) *front.Front {
	handles.mu.Lock()
	defer handles.mu.Unlock()
	old := handles.m.Load()
	if old == nil {
		return nil
	}
	f := (*old)[h]
	m := make(map[int64]*front.Front, len(*old))
	for k, v := range *old {
		if k != h {
			m[k] = v
		}
	}
	handles.m.Store(&m)
	return f
}
