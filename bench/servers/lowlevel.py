"""Low-level API server: NativeGrpcFront with Python threads looping
recv_batch and answering each call by its id: respond() for /echo.Echo/Say,
send_message() N-1 times then respond() for /echo.Echo/Count.

The two methods with request streams (client_streaming in the method
triple) read their messages by credit: Go reads a request message only
after request_messages() grants it, and each one arrives as an EVENT_MESSAGE
in recv_batch's batches, the client's half-close as one EVENT_HALF_CLOSE
(which uses a credit too):

* /echo.Echo/Collect keeps a window of COLLECT_WINDOW credits open (topped
  up by half when half of it is used), remembers the last message and
  respond()s with it at the half-close;
* /echo.Echo/Chat grants one message at a time: each EVENT_MESSAGE is
  send_message()d back and the next one requested; finish() at the
  half-close.

A Collect call's state (the last message and the credit left) lives in a
dict until its half-close, its cancellation, or a grant that says the call
has ended. With --threads above 1, events of one call may be taken by
different threads, so a Collect reply could miss the latest message: the
request-streaming methods are meant for one thread (the default).
"""

import sys
import threading

from bench.servers import _common

COLLECT_WINDOW = 32  # request messages granted ahead on a Collect call


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--threads", type=int, default=1, help="Python threads calling recv_batch")
    p.add_argument("--batch", type=int, default=256, help="max events per recv_batch")
    p.add_argument(
        "--metrics", choices=("off", "prometheus"), default="off", help="A66 metrics (a Prometheus endpoint)"
    )
    args = p.parse_args()
    _common.check_loopback(args.host)
    stop = _common.install_stop_signals()

    import pygrpc_native
    from pygrpc_native import EVENT_CALL, EVENT_CANCEL, EVENT_HALF_CLOSE, EVENT_MESSAGE, NativeGrpcFront

    pair = _common.tls_pair(args)
    credentials = pygrpc_native.ssl_server_credentials([pair]) if pair else None
    # Method ids are the positions in this list.
    SAY, COUNT, COLLECT, CHAT = range(4)
    front = NativeGrpcFront(
        f"{args.host}:{args.port}",
        [
            (_common.ECHO_METHOD, False),
            (_common.COUNT_METHOD, True),
            (_common.COLLECT_METHOD, False, True),
            (_common.CHAT_METHOD, True, True),
        ],
        credentials=credentials,
        metrics_address=f"{args.host}:0" if args.metrics == "prometheus" else None,
    )
    front.start()
    parse_count = _common.parse_count
    collecting: dict = {}  # Collect call id -> [last message, credits left]
    half = COLLECT_WINDOW // 2

    def serve() -> None:
        recv_batch, respond, send_message, finish = front.recv_batch, front.respond, front.send_message, front.finish
        request_messages = front.request_messages
        batch = args.batch
        while (events := recv_batch(batch)) is not None:
            for kind, call_id, method_id, payload, _client_key in events:
                if kind == EVENT_CALL:
                    if method_id == SAY:
                        respond(call_id, payload)
                    elif method_id == COUNT:
                        n, body = parse_count(payload)
                        for _ in range(n - 1):
                            if not send_message(call_id, body):
                                break
                        else:
                            if n > 0:
                                respond(call_id, body)
                            else:
                                finish(call_id, 0)
                    elif method_id == COLLECT:
                        collecting[call_id] = [b"", COLLECT_WINDOW]
                        if not request_messages(call_id, COLLECT_WINDOW):
                            collecting.pop(call_id, None)
                    else:  # CHAT
                        request_messages(call_id, 1)
                elif kind == EVENT_MESSAGE:
                    if method_id == CHAT:
                        if send_message(call_id, payload):
                            request_messages(call_id, 1)
                        continue
                    state = collecting.get(call_id)
                    if state is None:
                        continue
                    state[0] = payload
                    state[1] -= 1
                    if state[1] <= half:
                        if request_messages(call_id, COLLECT_WINDOW - state[1]):
                            state[1] = COLLECT_WINDOW
                        else:
                            collecting.pop(call_id, None)
                elif kind == EVENT_HALF_CLOSE:
                    if method_id == CHAT:
                        finish(call_id, 0, "")
                        continue
                    state = collecting.pop(call_id, None)
                    if state is not None:
                        respond(call_id, state[0])
                elif kind == EVENT_CANCEL:
                    collecting.pop(call_id, None)

    threads = [threading.Thread(target=serve, name=f"serve-{i}", daemon=True) for i in range(args.threads)]
    for t in threads:
        t.start()
    _common.announce(front.port)
    _common.wait(stop)
    front.stop(grace=args.grace)
    for t in threads:
        t.join(timeout=5.0)
    if any(t.is_alive() for t in threads):
        print("lowlevel server: a worker thread did not finish after stop()", file=sys.stderr, flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()
