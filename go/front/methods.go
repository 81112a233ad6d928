package front

import (
	"fmt"
	"sync"
	"sync/atomic"
)

// methodTable maps method paths to method ids. Methods can be added while
// the server runs (NativeGrpcFront.add_method, and server()'s lookups of
// methods only generic handlers know), so every call is routed through it
// rather than through grpc-go's static service registry. Reads happen on
// every call and take no lock: the maps are copied on write.
type methodTable struct {
	mu     sync.Mutex // serializes writers
	byPath atomic.Pointer[map[string]int32]
	list   atomic.Pointer[[]Method]
}

func newMethodTable(methods []Method) *methodTable {
	t := &methodTable{}
	byPath := make(map[string]int32, len(methods))
	for i, m := range methods {
		byPath[m.Path] = int32(i)
	}
	list := append([]Method(nil), methods...)
	t.byPath.Store(&byPath)
	t.list.Store(&list)
	return t
}

func (t *methodTable) lookup(path string) (int32, Method, bool) {
	id, ok := (*t.byPath.Load())[path]
	if !ok {
		return 0, Method{}, false
	}
	return id, (*t.list.Load())[id], true
}

func (t *methodTable) get(id int32) (Method, bool) {
	list := *t.list.Load()
	if id < 0 || int(id) >= len(list) {
		return Method{}, false
	}
	return list[id], true
}

// add registers a method and returns its id. Adding a method that exists
// with the same kind returns its id; with another kind it is an error.
func (t *methodTable) add(m Method) (int32, error) {
	if !validMethodPath(m.Path) {
		return 0, configErrorf("%q is not a method path (a non-empty :path without control characters but tab)", m.Path)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	old := *t.byPath.Load()
	list := *t.list.Load()
	if id, ok := old[m.Path]; ok {
		if list[id] != m {
			return 0, configErrorf("%s is already registered differently (%+v)", m.Path, list[id])
		}
		return id, nil
	}
	if len(list) >= 1<<30 {
		return 0, fmt.Errorf("too many methods")
	}
	id := int32(len(list))
	byPath := make(map[string]int32, len(old)+1)
	for k, v := range old {
		byPath[k] = v
	}
	byPath[m.Path] = id
	newList := append(list[:len(list):len(list)], m)
	t.list.Store(&newList)
	t.byPath.Store(&byPath)
	return id, nil
}
