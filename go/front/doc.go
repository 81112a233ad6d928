// Package front is the Go half of pygrpc-native: a gRPC server that owns the
// whole protocol (HTTP/2, flow control, deadlines, cancellation, keepalive,
// limits) and hands each call to Python as an event.
//
// The flow of one call:
//
//	client --HTTP/2--> the transport (grpc-go's server behind the seam of
//	        transport.go), which admits the call and hands it over as a
//	        ServerStream on the call's goroutine
//	     -> method id from the path; the request read (a unary request), or
//	        the request stream started under credit (requests.go)
//	     -> Event{Kind: EventCall} pushed on the front's Events
//	     -> Python takes a batch of events with Events.Recv (one GIL trip
//	        for many), and a request stream's messages as EventMessage
//	        events or by pulling them (Calls.Read)
//	     -> Python answers with Calls.Respond/Send/Finish from any thread,
//	        by call id, into the call's bounded op queue
//	     -> the call's goroutine writes the answer and returns.
//
// The call's goroutine never waits on Python without also watching the
// call's context, so deadlines and client cancellation are decided here, off
// the GIL: the client gets its status whether or not Python ever answers, and
// Python is told with an EventCancel.
package front
