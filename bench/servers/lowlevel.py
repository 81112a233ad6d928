"""Low-level API server: NativeGrpcFront with Python threads looping
recv_batch and answering each call by its id: respond() for /echo.Echo/Say,
send_message() N-1 times then respond() for /echo.Echo/Count."""

import sys
import threading

from bench.servers import _common


def main() -> None:
    p = _common.parser(__doc__)
    p.add_argument("--threads", type=int, default=1, help="Python threads calling recv_batch")
    p.add_argument("--batch", type=int, default=256, help="max events per recv_batch")
    args = p.parse_args()
    _common.check_loopback(args.host)
    stop = _common.install_stop_signals()

    import pygrpc_native
    from pygrpc_native import EVENT_CALL, NativeGrpcFront

    pair = _common.tls_pair(args)
    credentials = pygrpc_native.ssl_server_credentials([pair]) if pair else None
    front = NativeGrpcFront(
        f"{args.host}:{args.port}",
        [(_common.ECHO_METHOD, False), (_common.COUNT_METHOD, True)],
        credentials=credentials,
    )
    front.start()
    parse_count = _common.parse_count

    def serve() -> None:
        recv_batch, respond, send_message, finish = front.recv_batch, front.respond, front.send_message, front.finish
        batch = args.batch
        while (events := recv_batch(batch)) is not None:
            for kind, call_id, method_id, payload, _client_key in events:
                if kind != EVENT_CALL:
                    continue
                if method_id == 0:
                    respond(call_id, payload)
                    continue
                n, body = parse_count(payload)
                for _ in range(n - 1):
                    if not send_message(call_id, body):
                        break
                else:
                    if n > 0:
                        respond(call_id, body)
                    else:
                        finish(call_id, 0)

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
