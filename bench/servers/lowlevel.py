"""Low-level API server: NativeGrpcFront with Python threads looping recv_batch/respond."""

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

    from pygrpc_native import EVENT_CALL, NativeGrpcFront

    front = NativeGrpcFront(f"{args.host}:{args.port}", [(_common.ECHO_METHOD, False)])
    front.start()

    def serve() -> None:
        recv_batch, respond, batch = front.recv_batch, front.respond, args.batch
        while (events := recv_batch(batch)) is not None:
            for kind, call_id, _method_id, payload, _client_key in events:
                if kind == EVENT_CALL:
                    respond(call_id, payload)

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
