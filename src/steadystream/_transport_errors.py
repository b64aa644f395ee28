"""The one place where aiohttp's and the operating system's errors become steadystream's.

httpx keeps this in ``map_httpcore_exceptions()``: a transport's own exceptions are caught at
the boundary and raised again as the library's, ``from`` the original. Every call through
aiohttp goes inside :func:`map_transport_errors`; code above it catches only
:class:`~steadystream.SteadystreamError` subclasses. A timeout (asyncio's, or aiohttp's
socket timeouts, which are ``TimeoutError`` too) may map to its own error, since "no answer in
time" and "no connection" lead to different statuses and failover causes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import aiohttp

from steadystream._exceptions import SteadystreamError

__all__ = [
    "TRANSPORT_ERRORS",
    "describe_transport_error",
    "map_transport_error",
    "map_transport_errors",
]

TRANSPORT_ERRORS: tuple[type[Exception], ...] = (aiohttp.ClientError, OSError)
"""What a network call can raise that is the network's fault (``TimeoutError`` is an OSError)."""


def describe_transport_error(exc: BaseException) -> str:
    """A short reason: the error's own text, or its class name when it has none."""
    text = str(exc).strip()
    return text or type(exc).__name__


def map_transport_error(
    exc: BaseException,
    error: Callable[[str], SteadystreamError],
    what: str,
    *,
    timeout: Callable[[str], SteadystreamError] | None = None,
    redact: Callable[[str], str] | None = None,
) -> SteadystreamError:
    """The project's error for a transport error ``exc`` (raise it ``from exc``).

    For hot paths that catch :data:`TRANSPORT_ERRORS` themselves (a try costs nothing until
    it fails; a context manager costs a generator per call); :func:`map_transport_errors`
    is the same mapping as a ``with`` block.
    """
    scrub = redact if redact is not None else _same
    if isinstance(exc, TimeoutError):
        if timeout is not None:
            return timeout(scrub(what))
        return error(scrub(f"{what}: timed out"))
    return error(scrub(f"{what}: {describe_transport_error(exc)}"))


@contextlib.contextmanager
def map_transport_errors(
    error: Callable[[str], SteadystreamError],
    what: str,
    *,
    timeout: Callable[[str], SteadystreamError] | None = None,
    redact: Callable[[str], str] | None = None,
) -> Iterator[None]:
    """Run the block; a transport error leaves it as ``error(f"{what}: {reason}")``.

    ``timeout`` (when given) builds the error for a ``TimeoutError`` instead, with ``what``
    alone as its message. ``redact`` scrubs the message (a peer's text may echo a secret).
    """
    try:
        yield
    except TRANSPORT_ERRORS as exc:
        raise map_transport_error(exc, error, what, timeout=timeout, redact=redact) from exc


def _same(text: str) -> str:
    return text
