"""Differential tests: how handlers are found on grpc.server() against
pygrpc_native.server(), for what only the sync servers show: the first of
several generic handlers answering, and add_generic_rpc_handlers()
refusing what is not a handler. The
scenarios both kinds of server share are in test_diff_handlers.py."""

from concurrent import futures

import grpc
import pytest

import pygrpc_native
from diff.harness import call_unary, method, same, unary
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
