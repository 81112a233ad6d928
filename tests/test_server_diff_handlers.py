"""Differential tests: how handlers are found on grpc.server() against
pygrpc_native.server(), for what only the sync servers show: the first of
several generic handlers answering, and add_generic_rpc_handlers()
refusing what is not a handler. The
scenarios both kinds of server share are in test_diff_handlers.py."""

import collections
import threading
from concurrent import futures

import grpc
import pytest

import pygrpc_native
from diff.harness import both, call_unary, method, same, unary
from diff.servicers import MapHandler

pytestmark = pytest.mark.timeout(60)

SC = grpc.StatusCode


def _echo(req, ctx):
    return b"echo:" + req


def test_first_generic_handler_that_answers_wins():
    def setup(server, state):
        server.add_generic_rpc_handlers(
            (
                MapHandler({method("Echo"): unary(lambda req, ctx: b"first")}),
                MapHandler({method("Echo"): unary(lambda req, ctx: b"second"), method("Other"): unary(_echo)}),
            )
        )

    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"").responses, call_unary(run.channel, method("Other"), b"o").responses

    assert same(setup, scenario) == ((b"first",), (b"echo:o",))


def test_add_generic_rpc_handlers_rejects_non_handler():
    def attempt(kind_factory):
        pool = futures.ThreadPoolExecutor(1)
        server = kind_factory(pool)
        try:
            server.add_generic_rpc_handlers((object(),))
            return "accepted"
        except Exception as exc:  # noqa: BLE001
            return type(exc).__name__, str(exc).split('" ', 1)[1]
        finally:
            server.stop(None)
            pool.shutdown(wait=False)

    # grpcio's words, a missing space included.
    assert attempt(pygrpc_native.server) == attempt(grpc.server) == (
        "AttributeError",
        'must conform togrpc.GenericRpcHandler type but does not have "service" method!',
    )


class _Tagged(grpc.GenericRpcHandler):
    """Records what service() is given: the details' class, an attribute
    an interceptor set, and whether it is the object the interceptor
    passed on."""

    def __init__(self, state):
        self.state = state

    def service(self, details):
        self.state.append("seen", (type(details).__name__, getattr(details, "user", None), details is _PASSED[-1]))
        return unary(_echo) if details.method == method("Echo") else None


_PASSED = []


class _TaggingInterceptor(grpc.ServerInterceptor):
    """Passes on its own details object: the one it was given with an
    attribute set on it, or an object of a class of its own."""

    def __init__(self, own_class):
        self.own_class = own_class

    def intercept_service(self, continuation, handler_call_details):
        if self.own_class:
            details = _Details(handler_call_details.method, handler_call_details.invocation_metadata, "bob")
        else:
            details = handler_call_details
            details.user = "alice"
        _PASSED.append(details)
        return continuation(details)


class _Details(collections.namedtuple("_Details", ("method", "invocation_metadata", "user")), grpc.HandlerCallDetails):
    pass


@pytest.mark.parametrize("own_class", [False, True], ids=["attribute", "own-class"])
def test_service_gets_the_details_the_interceptor_passed_on(own_class):
    """grpcio hands a generic handler's service() the object an interceptor
    gave its continuation; ours made a new one of the method and metadata,
    so what the interceptor added was lost."""

    def setup(server, state):
        server.add_generic_rpc_handlers((_Tagged(state),))

    def scenario(run):
        codes = [call_unary(run.channel, method(m), b"x").code for m in ("Echo", "Unknown")]
        return codes, run.state.wait_for("seen")

    user = "bob" if own_class else "alice"
    name = "_Details" if own_class else "_HandlerCallDetails"
    assert same(setup, scenario, interceptors=(_TaggingInterceptor(own_class),)) == (
        [SC.OK, SC.UNIMPLEMENTED],
        [(name, user, True), (name, user, True)],
    )


_LOCAL = threading.local()


class _SetsAThreadLocal(grpc.ServerInterceptor):
    def intercept_service(self, continuation, handler_call_details):
        _LOCAL.method = handler_call_details.method
        return continuation(handler_call_details)


def test_known_difference_interceptors_run_on_the_handlers_thread():
    """README: grpcio runs interceptors on its serving thread, so the
    handler (on a pool thread) doesn't see a thread-local value an
    interceptor set; ours runs them on the handler's thread."""

    def setup(server, state):
        def handler(request, context):
            seen = getattr(_LOCAL, "method", None)
            _LOCAL.method = None
            return repr(seen).encode()

        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("diff.Diff", {"Echo": unary(handler)}),))

    def scenario(run):
        return call_unary(run.channel, method("Echo"), b"x").responses

    ref, ours = both(setup, scenario, interceptors=(_SetsAThreadLocal(),))
    assert (ref, ours) == ((b"None",), (repr(method("Echo")).encode(),))


class _RefusesDeny(grpc.ServerInterceptor):
    def intercept_service(self, continuation, handler_call_details):
        return None if dict(handler_call_details.invocation_metadata).get("x-deny") else continuation(handler_call_details)


def test_known_difference_calls_over_the_limit_are_refused_before_the_interceptors():
    """README: with maximum_concurrent_rpcs, grpcio runs the interceptors
    before it counts a call, so one that refuses the call answers it;
    ours refuses a call over the limit in Go first."""
    release = threading.Event()

    def setup(server, state):
        def hold(request, context):
            state.record("held", True)
            release.wait(10)
            return request

        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("diff.Diff", {"Hold": unary(hold)}),))

    def scenario(run):
        release.clear()
        held = run.channel.unary_unary(method("Hold")).future(b"x", timeout=10)
        run.state.wait_for("held")
        denied = call_unary(run.channel, method("Hold"), b"y", metadata=(("x-deny", "1"),)).code
        release.set()
        held.result(timeout=10)
        return denied

    ref, ours = both(setup, scenario, interceptors=(_RefusesDeny(),), maximum_concurrent_rpcs=1)
    assert (ref, ours) == (SC.UNIMPLEMENTED, SC.RESOURCE_EXHAUSTED)


def test_known_difference_registered_unary_method_called_with_no_request():
    """A client half-closing without a request to a unary method registered
    as grpcio-tools' generated code registers it
    (add_registered_method_handlers): grpc.server() writes "b''" where the
    path goes (its call details hold no path for such a method); ours names
    the path, as for a method of a generic handler (README: known
    differences)."""

    def setup(server, state):
        server.add_registered_method_handlers("diff.Diff", {"Echo": unary(lambda req, ctx: req)})

    def scenario(run):
        try:
            return run.channel.stream_unary(method("Echo"))(iter(()), timeout=5)
        except grpc.RpcError as err:
            return err.code(), err.details()

    ref, ours = both(setup, scenario)
    assert ref == (grpc.StatusCode.UNIMPLEMENTED, "\"b''\" requires exactly one request message.")
    assert ours == (grpc.StatusCode.UNIMPLEMENTED, "\"b'/diff.Diff/Echo'\" requires exactly one request message.")
