"""The thread that runs grpc.dynamic_ssl_server_credentials() fetchers.

Before each new TLS handshake on a port with such credentials, the Go core
asks for new key material (go/front/tlsfetch.go). This thread waits for
those requests in Go with the GIL released, runs the fetcher with the GIL,
and answers: the configuration it returned, or "keep the current one" when
it returned None, raised (logged) or returned something pygrpc_native can't
read (logged). The Go side stops waiting after a timeout and keeps the
current configuration, so a slow fetcher delays new connections but never
the calls of existing ones, which never come here.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any, Callable, Dict, Optional

_LOGGER = logging.getLogger(__name__)

# How long one wait in Go lasts before the thread looks again; only bounds
# how late the thread notices interpreter shutdown.
_WAIT_MS = 1000

_lock = threading.Lock()
_numbers = itertools.count(1)
# Fetchers by the number the Go core knows them by, from their credentials'
# creation until those credentials are gone (forget; a server holds the
# credentials it serves). A number no longer here keeps the current
# configuration.
_fetchers: Dict[int, Callable[[], Any]] = {}
_to_json: Optional[Callable[[Any], Optional[str]]] = None
_thread: Optional[threading.Thread] = None


def register(fetcher: Callable[[], Any], to_json: Callable[[Any], Optional[str]]) -> int:
    """Registers a fetcher; to_json turns what it returns into key material
    JSON (None: not readable). Returns the fetcher's number."""
    global _to_json
    if not callable(fetcher):
        raise TypeError(f"the certificate configuration fetcher must be callable, not {type(fetcher).__name__}")
    with _lock:
        number = next(_numbers)
        _fetchers[number] = fetcher
        _to_json = to_json
    return number


def forget(number: int) -> None:
    """Drops fetcher number (its credentials object is gone)."""
    with _lock:
        _fetchers.pop(number, None)


def start() -> None:
    """Starts the thread, once per process."""
    global _thread
    with _lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_serve, name="pygrpc_native TLS fetcher", daemon=True)
            _thread.start()


def _serve() -> None:
    # Loaded by the front that asks for fetches long before this runs; not
    # with this module, which ``import pygrpc_native`` loads (README: fork).
    from . import _native

    while True:
        request = _native.tls_next_fetch(_WAIT_MS)
        if request is not None:
            request_id, number = request
            _native.tls_fetch_done(request_id, _fetch(number))


def _fetch(number: int) -> Optional[str]:
    """The key material JSON fetcher number returns now, or None to keep
    the current configuration."""
    fetcher = _fetchers.get(number)
    if fetcher is None or _to_json is None:
        return None
    try:
        configuration = fetcher()
    except Exception:
        _LOGGER.exception("the certificate configuration fetcher raised; the current TLS credentials stay in use")
        return None
    if configuration is None:
        return None
    material = _to_json(configuration)
    if material is None:
        # Named by type only: what it returned may hold a private key.
        _LOGGER.error(
            "the certificate configuration fetcher returned a %s, not a configuration made by "
            "grpc.ssl_server_certificate_configuration() after pygrpc_native was imported; "
            "the current TLS credentials stay in use",
            type(configuration).__name__,
        )
    return material
