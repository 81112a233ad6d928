package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"testing"
)

// value is what readValue decodes: a test-side reading of the tagged
// format that decode_value in _native.c implements.
func readValue(b []byte) (v any, rest []byte, err error) {
	if len(b) == 0 {
		return nil, nil, fmt.Errorf("empty")
	}
	tag, b := b[0], b[1:]
	u32 := func() (int, error) {
		if len(b) < 4 {
			return 0, fmt.Errorf("short length")
		}
		n := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		return n, nil
	}
	switch tag {
	case 'N':
		return nil, b, nil
	case 'T', 'F':
		return tag == 'T', b, nil
	case 'i', 'd':
		if len(b) < 8 {
			return nil, nil, fmt.Errorf("short number")
		}
		x := binary.LittleEndian.Uint64(b)
		if tag == 'i' {
			return int64(x), b[8:], nil
		}
		return math.Float64frombits(x), b[8:], nil
	case 'b', 's', 'k':
		n, err := u32()
		if err != nil || len(b) < n {
			return nil, nil, fmt.Errorf("short bytes")
		}
		if tag == 'b' {
			return slices.Clone(b[:n]), b[n:], nil
		}
		return string(b[:n]), b[n:], nil
	case 't', 'l', 'm':
		n, err := u32()
		if err != nil {
			return nil, nil, err
		}
		if tag == 'm' {
			n *= 2
		}
		items := []any{}
		for i := 0; i < n; i++ {
			var item any
			if item, b, err = readValue(b); err != nil {
				return nil, nil, err
			}
			items = append(items, item)
		}
		return items, b, nil
	}
	return nil, nil, fmt.Errorf("unknown tag %q", tag)
}

// FuzzEncoder encodes an event-shaped tuple (as recv_batch's events are)
// and a metadata-shaped dict and reads them back: every value must come
// back unchanged, whatever bytes the payload, strings and numbers hold.
func FuzzEncoder(f *testing.F) {
	f.Add(int64(1), uint64(7), int64(-1), []byte("payload"), "ipv4:127.0.0.1:5000", "key", 1.5, true)
	f.Add(int64(3), uint64(math.MaxUint64), int64(math.MinInt64), []byte{}, "", "\xff\x00", math.Inf(-1), false)
	f.Fuzz(func(t *testing.T, kind int64, id uint64, method int64, payload []byte, clientKey, key string, x float64, flag bool) {
		e := &encoder{}
		e.tuple(7)
		e.int(kind)
		e.int(int64(id))
		e.int(method)
		e.bytes(payload)
		e.key(clientKey)
		e.boolean(flag)
		e.dict(2)
		e.str(key)
		e.float(x)
		e.str("none")
		e.none()
		got, rest, err := readValue(e.buf)
		if err != nil || len(rest) != 0 {
			t.Fatalf("encoding unreadable (%v) or %d bytes left over", err, len(rest))
		}
		items := got.([]any)
		if items[0] != kind || items[1] != int64(id) || items[2] != method || !bytes.Equal(items[3].([]byte), payload) ||
			items[4] != clientKey || items[5] != flag {
			t.Fatalf("event changed: %v", items)
		}
		d := items[6].([]any)
		if d[0] != key || math.Float64bits(d[1].(float64)) != math.Float64bits(x) || d[2] != "none" || d[3] != nil {
			t.Fatalf("dict changed: %v", d)
		}
	})
}
