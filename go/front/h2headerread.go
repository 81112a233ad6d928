package front

import (
	"io"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Header blocks (HEADERS and its CONTINUATION frames) are read here, from
// the connection's reader, not by x/net's Framer: the Framer's
// ReadMetaHeaders costs about a dozen allocations a call (the frame values,
// an emit closure per block, a growing field slice), where this reads the
// frames in place (bufio Peek), decodes with one HPACK decoder whose emit
// func is set once, and reuses one field slice. It keeps every check the
// Framer makes on a header block (readMetaFrame, parseHeadersFrame,
// checkFrameOrder in x/net v0.62.0), with the same errors, which readError
// turns into the same frames on the wire:
//   - a frame over h2MaxReadFrame: http2.ErrFrameTooLarge (checked before
//     frame order, as the Framer does);
//   - CONTINUATION without a header block open, or any other frame (or a
//     CONTINUATION of another stream) inside one: connection error
//     PROTOCOL_ERROR;
//   - HEADERS on stream 0: connection error PROTOCOL_ERROR; padding or
//     priority fields cut short: io.ErrUnexpectedEOF; padding longer than
//     the payload: stream error PROTOCOL_ERROR (the block's CONTINUATION
//     frames are then read and dropped: skip);
//   - HPACK errors, and strings over the list limit: connection error
//     COMPRESSION_ERROR;
//   - a field past the header list limit: the rest of the block is decoded
//     but dropped, and the block is truncated (headers answers); a
//     CONTINUATION fragment over twice what the limit has left (after a
//     truncation: any), or one after an invalid field, is a connection
//     error PROTOCOL_ERROR, so a CONTINUATION flood costs a connection
//     about the limit;
//   - an invalid field name or value, a pseudo-header after a regular one,
//     an unknown or repeated pseudo-header, request and response
//     pseudo-headers mixed: stream error PROTOCOL_ERROR, once the block is
//     decoded.
//
// The Framer still reads every other frame, and the client's first frame
// (handshake), where it decodes a HEADERS itself; that only ever closes the
// connection (the first frame must be SETTINGS).

// headerBlock is a decoded header block, as headers takes it.
type headerBlock struct {
	streamID  uint32
	fields    []hpack.HeaderField // the reader's slice: valid during headers only
	endStream bool
	truncated bool // a field went past the header list limit: fields is partial
}

// headerReader is the connection's state for header blocks. Reader only.
type headerReader struct {
	// dec is the connection's HPACK decoding context; its emit func is
	// field, set once the handshake is done.
	dec   *hpack.Decoder
	limit uint32 // the header list size decoded (h2HeaderListLimit)
	// fields is the block being decoded: emptied at its start, cleared
	// after headers (no strings kept alive), dropped when it grew large.
	fields []hpack.HeaderField
	// Per block: what the list limit has left (fields named "trailer"
	// count apart, as x/net counts them), and what the fields so far were.
	headersLeft, trailersLeft      uint32
	sawRegular, invalid, truncated bool
	// skip is the stream of a HEADERS frame refused before its block was
	// decoded (bad padding) whose CONTINUATION frames are still due: they
	// are read, in order, and dropped (0: none).
	skip uint32
}

// fieldsKept is the largest field slice kept for the next block.
const fieldsKept = 64

func newHeaderReader(limit uint32) headerReader {
	d := hpack.NewDecoder(4096, nil)
	d.SetMaxStringLength(int(limit))
	return headerReader{dec: d, limit: limit}
}

// begin starts a block.
func (h *headerReader) begin() {
	h.fields = h.fields[:0]
	h.headersLeft, h.trailersLeft = h.limit, h.limit
	h.sawRegular, h.invalid, h.truncated = false, false, false
	h.dec.SetEmitEnabled(true)
}

// done forgets the block's fields.
func (h *headerReader) done() {
	clear(h.fields)
	h.fields = h.fields[:0]
	if cap(h.fields) > fieldsKept {
		h.fields = nil
	}
}

// field is the decoder's emit func: it checks a field as x/net's
// readMetaFrame does and keeps it while the list limit allows. After an
// invalid field or the limit, the decoder emits nothing more in the block.
func (h *headerReader) field(f hpack.HeaderField) {
	// A raw -bin value (settingTrueBinary) is any bytes after a NUL.
	raw := f.Value != "" && f.Value[0] == 0 && BinaryOnArrival(f.Name)
	if !raw && !httpguts.ValidHeaderFieldValue(f.Value) {
		h.invalid = true
	}
	if strings.HasPrefix(f.Name, ":") {
		if h.sawRegular {
			h.invalid = true
		}
	} else {
		h.sawRegular = true
		if !validFieldName(f.Name) {
			h.invalid = true
		}
	}
	if h.invalid {
		h.dec.SetEmitEnabled(false)
		return
	}
	left, size := &h.headersLeft, f.Size()
	if f.Name == "trailer" {
		n := uint32(strings.Count(f.Value, ",") + 1)
		left, size = &h.trailersLeft, uint32(len(f.Value))-n+1+n*hpack.HeaderField{}.Size()
	}
	if size > *left {
		h.dec.SetEmitEnabled(false)
		h.truncated = true
		h.headersLeft, h.trailersLeft = 0, 0
		return
	}
	*left -= size
	h.fields = append(h.fields, f)
}

// validFieldName: a non-empty token without upper case (x/net's
// validWireHeaderFieldName).
func validFieldName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !httpguts.IsTokenRune(r) || 'A' <= r && r <= 'Z' {
			return false
		}
	}
	return true
}

// validPseudos is x/net's checkPseudos: the pseudo-header fields (a
// prefix: field refuses one after a regular field) are known, none twice,
// and not a request's and a response's mixed.
func validPseudos(fields []hpack.HeaderField) bool {
	var request, response bool
	for i, f := range fields {
		if !f.IsPseudo() {
			break
		}
		switch f.Name {
		case ":method", ":path", ":scheme", ":authority", ":protocol":
			request = true
		case ":status":
			response = true
		default:
			return false
		}
		for _, g := range fields[:i] {
			if g.Name == f.Name {
				return false
			}
		}
	}
	return !(request && response)
}

// frameHead is a frame's 9-byte header.
type frameHead struct {
	n     int
	typ   http2.FrameType
	flags http2.Flags
	id    uint32
}

// peekHead is the next frame's header, left in the reader.
func (c *h2Conn) peekHead() (frameHead, error) {
	b, err := c.br.Peek(9)
	if err != nil {
		if len(b) > 0 && err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return frameHead{}, err
	}
	return frameHead{
		n:     int(b[0])<<16 | int(b[1])<<8 | int(b[2]),
		typ:   http2.FrameType(b[3]),
		flags: http2.Flags(b[4]),
		id:    uint32(b[5]&0x7f)<<24 | uint32(b[6])<<16 | uint32(b[7])<<8 | uint32(b[8]),
	}, nil
}

// peekPayload is the payload of the frame fh heads, still in the reader
// (valid until the reader moves on: take drops the frame). The reader's
// buffer holds a whole frame (h2MaxReadFrame, see handshake).
func (c *h2Conn) peekPayload(fh frameHead) ([]byte, error) {
	b, err := c.br.Peek(9 + fh.n)
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	c.lastRead.Store(time.Now().UnixNano())
	return b[9:], nil
}

// take drops the frame fh heads from the reader.
func (c *h2Conn) take(fh frameHead) {
	_, _ = c.br.Discard(9 + fh.n) // peeked: cannot fail
}

// headersDirect reads the next frame when it belongs to a header block
// (HEADERS, CONTINUATION, or any frame while skip is set) and acts on it;
// any other is left to the caller (false). An error closes the
// connection.
func (c *h2Conn) headersDirect() (bool, error) {
	fh, err := c.peekHead()
	if err != nil {
		return false, nil // a read error is the Framer's to report
	}
	switch {
	case c.hdr.skip != 0:
		return true, c.readError(c.skipContinuation(fh))
	case fh.typ == http2.FrameHeaders:
		hb, err := c.readHeaderBlock(fh)
		if err == nil {
			err = c.headers(hb)
		} else {
			err = c.readError(err)
		}
		c.hdr.done()
		return true, err
	case fh.typ == http2.FrameContinuation:
		if fh.n > h2MaxReadFrame {
			return true, c.readError(http2.ErrFrameTooLarge)
		}
		return true, c.readError(http2.ConnectionError(http2.ErrCodeProtocol)) // no block open
	}
	return false, nil
}

// continuationHead checks that fh, read inside stream id's header block,
// is its next CONTINUATION.
func continuationHead(fh frameHead, id uint32) error {
	if fh.n > h2MaxReadFrame {
		return http2.ErrFrameTooLarge
	}
	if fh.typ != http2.FrameContinuation || fh.id != id {
		return http2.ConnectionError(http2.ErrCodeProtocol)
	}
	return nil
}

// skipContinuation reads and drops the next frame of a refused block.
func (c *h2Conn) skipContinuation(fh frameHead) error {
	if err := continuationHead(fh, c.hdr.skip); err != nil {
		return err
	}
	if _, err := c.peekPayload(fh); err != nil {
		return err
	}
	c.take(fh)
	if fh.flags.Has(http2.FlagContinuationEndHeaders) {
		c.hdr.skip = 0
	}
	return nil
}

// readHeaderBlock reads the HEADERS frame fh heads and its CONTINUATION
// frames, and decodes their block into c.hdr.fields.
func (c *h2Conn) readHeaderBlock(fh frameHead) (headerBlock, error) {
	if fh.n > h2MaxReadFrame {
		return headerBlock{}, http2.ErrFrameTooLarge
	}
	p, err := c.peekPayload(fh)
	if err != nil {
		return headerBlock{}, err
	}
	id := fh.id
	if id == 0 {
		return headerBlock{}, http2.ConnectionError(http2.ErrCodeProtocol)
	}
	pad := 0
	if fh.flags.Has(http2.FlagHeadersPadded) {
		if len(p) < 1 {
			return headerBlock{}, io.ErrUnexpectedEOF
		}
		pad, p = int(p[0]), p[1:]
	}
	if fh.flags.Has(http2.FlagHeadersPriority) {
		// Dependency and weight, unused (RFC 9113 deprecates them; x/net
		// and grpc-go ignore them, a dependency on itself included).
		if len(p) < 5 {
			return headerBlock{}, io.ErrUnexpectedEOF
		}
		p = p[5:]
	}
	ended := fh.flags.Has(http2.FlagHeadersEndHeaders)
	if len(p) < pad {
		c.take(fh)
		if !ended {
			c.hdr.skip = id
		}
		return headerBlock{}, http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	hb := headerBlock{streamID: id, endStream: fh.flags.Has(http2.FlagHeadersEndStream)}
	h := &c.hdr
	h.begin()
	frag := p[:len(p)-pad]
	for {
		if int64(len(frag)) > 2*(int64(h.headersLeft)+int64(h.trailersLeft)) || h.invalid {
			return headerBlock{}, http2.ConnectionError(http2.ErrCodeProtocol)
		}
		if _, err := h.dec.Write(frag); err != nil {
			return headerBlock{}, http2.ConnectionError(http2.ErrCodeCompression)
		}
		c.take(fh)
		if ended {
			break
		}
		if fh, err = c.peekHead(); err != nil {
			return headerBlock{}, err
		}
		if err := continuationHead(fh, id); err != nil {
			return headerBlock{}, err
		}
		if frag, err = c.peekPayload(fh); err != nil {
			return headerBlock{}, err
		}
		ended = fh.flags.Has(http2.FlagContinuationEndHeaders)
	}
	if err := h.dec.Close(); err != nil {
		return headerBlock{}, http2.ConnectionError(http2.ErrCodeCompression)
	}
	if h.invalid || !validPseudos(h.fields) {
		return headerBlock{}, http2.StreamError{StreamID: id, Code: http2.ErrCodeProtocol}
	}
	hb.fields, hb.truncated = h.fields, h.truncated
	return hb, nil
}
