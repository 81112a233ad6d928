// Package front is the Go half of pygrpc-native: a gRPC server that owns the
// whole protocol (HTTP/2, flow control, deadlines, cancellation, keepalive,
// limits) and hands each call to Python as an event.
//
// The flow of one call:
//
//	client --HTTP/2--> grpc-go handler goroutine
//	        method id from the path, request bytes read with a raw codec
//	     -> Event{Kind: EventCall} pushed on the front's Events
//	     -> Python takes a batch of events with Events.Recv (one GIL trip
//	        for many)
//	     -> Python answers with Calls.Respond/Send/Finish from any thread,
//	        by call id
//	     -> the handler goroutine writes the answer and returns.
//
// The handler goroutine never waits on Python without also watching the
// call's context, so deadlines and client cancellation are decided here, off
// the GIL: the client gets its status whether or not Python ever answers, and
// Python is told with an EventCancel.
package front
