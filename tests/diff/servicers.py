"""Servicers and generic handlers more than one differential test file serves."""

import grpc
import grpc.aio

from diff.protos import generate


class MapHandler(grpc.GenericRpcHandler):
    """A hand-written generic handler with a fixed map of methods (full path -> handler)."""

    def __init__(self, handlers):
        self._handlers = handlers

    def service(self, handler_call_details):
        return self._handlers.get(handler_call_details.method)


def echo_servicer(flavour):
    """(pb2, pb2_grpc, servicer) of proto/echo.proto for flavour's servers:
    Say answers "said <message>" (aborts INVALID_ARGUMENT for "fail"),
    Count streams <count> replies."""
    pb2, pb2_grpc = generate("echo")

    class Echo(pb2_grpc.EchoServicer):
        async def Say(self, request, context):
            if request.message == "fail":
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no failing allowed")
            return pb2.EchoReply(message="said " + request.message)

        async def Count(self, request, context):
            for i in range(request.count):
                yield pb2.EchoReply(message=request.message, index=i)

    return pb2, pb2_grpc, flavour.servicer(Echo())


def diffsuite_servicer(flavour, style="iterate"):
    """(pb2, pb2_grpc, servicer) of proto/diffsuite.proto for flavour's
    servers, one method of each kind. style "iterate": the streams are async
    generators and iterate over the requests with async for; "read" (grpc.aio
    only): they call context.write() and context.read() until grpc.aio.EOF.
    A request text "fail" makes ClientStream raise, "abort" makes
    ClientStream and Bidi abort (ClientStream with trailing metadata, which
    only grpc.aio's abort() takes)."""
    pb2, pb2_grpc = generate("diffsuite")
    SC = grpc.StatusCode

    async def requests(request_iterator, context):
        if style == "iterate":
            async for r in request_iterator:
                yield r
        else:
            while (r := await context.read()) is not grpc.aio.EOF:
                yield r

    class IteratingSuite(pb2_grpc.DiffSuiteServicer):
        async def Unary(self, request, context):
            return pb2.Reply(text=request.text[::-1], blob=request.blob)

        async def ServerStream(self, request, context):
            for i in range(request.count):
                yield pb2.Reply(text=request.text, index=i)

        async def ClientStream(self, request_iterator, context):
            texts = [r.text async for r in requests(request_iterator, context)]
            if "fail" in texts:
                raise ValueError("client stream failed")
            if "abort" in texts:
                await context.abort(SC.FAILED_PRECONDITION, "client stream aborted", (("x-cs", "1"),))
            await context.send_initial_metadata((("x-cs-init", str(len(texts))),))
            context.set_trailing_metadata((("x-cs-trail", "+".join(texts)),))
            return pb2.Reply(text="+".join(texts), index=len(texts))

        async def Bidi(self, request_iterator, context):
            i = 0
            async for r in requests(request_iterator, context):
                if r.text == "abort":
                    await context.abort(SC.INVALID_ARGUMENT, "bidi abort ü")
                yield pb2.Reply(text=r.text.upper(), index=i)
                i += 1

    class WritingSuite(IteratingSuite):
        """The same replies, written with context.write()."""

        async def ServerStream(self, request, context):
            async for reply in IteratingSuite.ServerStream(self, request, context):
                await context.write(reply)

        async def Bidi(self, request_iterator, context):
            async for reply in IteratingSuite.Bidi(self, request_iterator, context):
                await context.write(reply)

    suite = IteratingSuite() if style == "iterate" else WritingSuite()
    return pb2, pb2_grpc, flavour.servicer(suite, request_streaming=("ClientStream", "Bidi"))
