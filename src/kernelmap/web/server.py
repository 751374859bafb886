"""The app on uvicorn, with limits on what a client may hold: a request's
head must arrive whole within `HEAD_TIMEOUT` seconds of the connection
opening (or of the previous response on a kept-alive connection), else the
connection is closed; idle kept-alive connections close after
`KEEP_ALIVE` seconds; a request head is at most `MAX_HEAD` bytes; and at most
`MAX_CONNECTIONS` connections are served at once (503 beyond). A body is
read by the one route that takes one (trace upload), under its own deadline.

uvicorn times out idle kept-alive connections only: a client that opens a
connection and sends half a request head, or one byte a minute, would hold
it for ever. `TimedH11Protocol` adds the deadline on the head.
"""

from __future__ import annotations

import socket
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

HEAD_TIMEOUT = 10.0
KEEP_ALIVE = 5
MAX_HEAD = 64 * 1024
MAX_CONNECTIONS = 256


class TimedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol, closing a connection whose request head is not
    complete `head_timeout` seconds after it could start."""

    head_timeout = HEAD_TIMEOUT

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._head_deadline = None
        self._arm_head_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.conn.their_state is not h11.IDLE:  # the head is in (or the connection is done)
            self._disarm_head_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_deadline()
        super().connection_lost(exc)

    def _arm_head_deadline(self) -> None:
        self._disarm_head_deadline()
        self._head_deadline = self.loop.call_later(self.head_timeout, self._head_too_slow)

    def _disarm_head_deadline(self) -> None:
        if getattr(self, "_head_deadline", None) is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def config(app, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for the app, with the limits above; `options`
    (host, port, log_level, ...) are uvicorn's own."""
    options.setdefault("log_level", "warning")
    options.setdefault("lifespan", "off")
    return uvicorn.Config(
        app,
        http=TimedH11Protocol,
        ws="none",
        timeout_keep_alive=KEEP_ALIVE,
        h11_max_incomplete_event_size=MAX_HEAD,
        limit_concurrency=MAX_CONNECTIONS,
        **options,
    )


def host_names(host: str, address: str) -> set[str]:
    """The names a server bound to `address` (what `--host` gave, `host`)
    answers to beyond the loopback ones: the name and the address it bound,
    and for an all-interfaces bind (0.0.0.0, ::) this machine's own names
    and the addresses they stand for."""
    names = {host.lower().strip("[]"), address.lower()}
    if address in ("0.0.0.0", "::"):
        for name in {socket.gethostname(), socket.getfqdn()}:
            names.add(name.lower())
            try:
                names.update(str(info[4][0]).lower() for info in socket.getaddrinfo(name, None, type=socket.SOCK_STREAM))
            except (OSError, UnicodeError):
                pass
    return {n for n in names if n}
