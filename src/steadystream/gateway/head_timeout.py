"""Slow-loris bounds for uvicorn: a connection must send a whole request head in time.

uvicorn bounds an idle kept-alive connection (``timeout_keep_alive``) and h11/httptools bound
a head's size, but nothing bounds how long a head may take to trickle in: 900 connections
sending a byte now and then were held for a minute. This protocol (uvicorn's own, with one
timer) closes a connection whose request head has not arrived ``timeout_s`` after it
opened, or after the first byte of a next request on a kept-alive connection. A request
whose head is in is the app's: its body is bounded by ``server.body_timeout``
(:mod:`steadystream.gateway.app`), its response by the watchdog.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.auto import AutoHTTPProtocol

__all__ = ["head_timeout_protocol"]


def head_timeout_protocol(timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol class, closing connections whose head is late."""
    base: Any = AutoHTTPProtocol

    class HeadTimeoutProtocol(base):  # type: ignore[misc]
        _head_timer: asyncio.TimerHandle | None = None
        _head_cycle: Any = None

        def connection_made(self, transport: asyncio.Transport) -> None:
            super().connection_made(transport)
            self._arm_head_timer()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            cycle = self.cycle
            if self._head_timer is None and cycle is not None and cycle.response_complete:
                self._arm_head_timer()  # bytes of a next request on a kept-alive connection

        def connection_lost(self, exc: Exception | None) -> None:
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            super().connection_lost(exc)

        def _arm_head_timer(self) -> None:
            self._head_cycle = self.cycle
            self._head_timer = self.loop.call_later(timeout_s, self._head_late)

        def _head_late(self) -> None:
            self._head_timer = None
            transport = self.transport
            if self.cycle is self._head_cycle and not transport.is_closing():
                transport.close()  # no new request head since the timer started

    return HeadTimeoutProtocol
