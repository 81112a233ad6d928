"""The server objects users hold: server() and aio.server() return a
handle, grpc.Server (or grpc.aio.Server) with grpcio's public names and no
others, that forwards each method to the server that serves.

Why a handle rather than the server itself: the server's own threads (the
monitor, drain tasks, the callbacks' thread) and, on aio, the loop's reader
hold references to the server that serves. Were that the object users
hold, a started server dropped without stop() would never be collected and
would serve on for good, where grpcio's stops (its threads hold its state,
not the server object). Nothing of ours references a handle, so when the
user's last reference goes, the handle is collected and the server is told
(``collected()``: it stops, as grpcio's does).
"""

from __future__ import annotations

from typing import Any, Optional

import grpc
import grpc.aio


class _Forwarding:
    """What both handles forward alike: registration and ports."""

    def __init__(self, server: Any) -> None:
        self._server = server

    def add_generic_rpc_handlers(self, generic_rpc_handlers: Any) -> None:
        self._server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name: Any, method_handlers: Any) -> None:
        self._server.add_registered_method_handlers(service_name, method_handlers)

    def add_insecure_port(self, address: Any) -> int:
        return self._server.add_insecure_port(address)  # type: ignore[no-any-return]

    def add_secure_port(self, address: Any, server_credentials: Any) -> int:
        return self._server.add_secure_port(address, server_credentials)  # type: ignore[no-any-return]

    def __del__(self) -> None:
        server = self.__dict__.get("_server")  # absent if __init__ never ran
        if server is not None:
            server.collected()


class ServerHandle(_Forwarding, grpc.Server):
    """What server() returns."""

    def start(self) -> None:
        self._server.start()

    def stop(self, grace: Optional[float]) -> Any:
        return self._server.stop(grace)

    def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
        return self._server.wait_for_termination(timeout)  # type: ignore[no-any-return]


class AioServerHandle(_Forwarding, grpc.aio.Server):
    """What aio.server() returns."""

    async def start(self) -> None:
        await self._server.start()

    async def stop(self, grace: Optional[float]) -> None:
        await self._server.stop(grace)

    async def wait_for_termination(self, timeout: Optional[float] = None) -> bool:
        return await self._server.wait_for_termination(timeout)  # type: ignore[no-any-return]
