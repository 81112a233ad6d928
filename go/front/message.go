package front

import (
	"math/bits"
	"sync"

	"google.golang.org/grpc/mem"
)

// CopyMessage copies a message that grpc-go will send (Calls.Respond,
// Send, Finish) into a buffer it frees once written: one copy, into memory
// that is not cleared first (messagePool). Messages below grpc-go's pooling
// threshold are plain slices, as grpc-go's own are.
func CopyMessage(src []byte) mem.BufferSlice {
	if len(src) == 0 {
		return nil // an empty message, with nothing to allocate
	}
	if mem.IsBelowBufferPoolingThreshold(len(src)) {
		return mem.BufferSlice{mem.SliceBuffer(append([]byte(nil), src...))}
	}
	buf := messagePool.Get(len(src))
	copy(*buf, src)
	return mem.BufferSlice{mem.NewBuffer(buf, messagePool)}
}

// Tiers of messagePool: powers of two from 1 KiB to 16 MiB; larger buffers
// are allocated and dropped.
const (
	minTierExp = 10
	maxTierExp = 24
)

// messagePool holds the buffers of messages both ways: the replies
// CopyMessage fills, and the frames grpc-go reads requests into (the
// server's buffer pool). Both are written whole before anything reads
// them, so the clearing grpc-go's default pool does on every Get (which
// costs about half as much as the copy that follows) is left out.
var messagePool mem.BufferPool = &dirtyPool{}

// dirtyPool is a mem.BufferPool of power-of-two buffers that are handed out
// as they were returned, not cleared: only for buffers overwritten whole.
type dirtyPool struct {
	tiers [maxTierExp - minTierExp + 1]sync.Pool
}

func (p *dirtyPool) Get(n int) *[]byte {
	exp := max(bits.Len(uint(n-1)), minTierExp)
	if exp > maxTierExp {
		b := make([]byte, n)
		return &b
	}
	if bp, ok := p.tiers[exp-minTierExp].Get().(*[]byte); ok {
		*bp = (*bp)[:n]
		return bp
	}
	b := make([]byte, n, 1<<exp)
	return &b
}

func (p *dirtyPool) Put(bp *[]byte) {
	c := cap(*bp)
	exp := bits.Len(uint(c)) - 1
	if c != 1<<exp || exp < minTierExp || exp > maxTierExp {
		return // not one of ours
	}
	p.tiers[exp-minTierExp].Put(bp)
}
