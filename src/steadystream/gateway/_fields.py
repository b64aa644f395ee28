"""The screened value types of the gateway's configuration (:mod:`.config`): sizes, names of
environment variables, header names and values, upstream URLs.

A refused value of a type that may hold a secret (a variable's value pasted where its name
goes, a header's value, a URL's password or query token) is never quoted back
(:class:`~steadystream._validation.Screen`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import BeforeValidator

from steadystream._exceptions import SpecError
from steadystream._units import parse_size
from steadystream._validation import Screen, shown_url, url_problem

__all__ = [
    "HOST",
    "MOST_BYTES",
    "NAME",
    "OWNED_HEADERS",
    "BaseUrl",
    "EnvName",
    "EnvNames",
    "HeaderName",
    "HeaderValue",
    "Size",
    "headers_problem",
]

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# RFC 9110 5.6.2: a header name is a token.
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
# RFC 9110 5.5: a header value has no control character but a tab (a CR or LF would start
# another header, or end the head, on every request sent; the HTTP client refuses them).
_HEADER_VALUE = re.compile(r"^[^\x00-\x08\x0a-\x1f\x7f]*$")
# A Host header's value: a name or IPv4 address, or an IPv6 address in brackets; a port.
HOST = re.compile(
    r"(?:[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*\.?|\[[0-9A-Fa-f:.]+\])(?::(?P<port>[0-9]{1,5}))?"
)
# Headers the gateway owns on its upstream requests. Framing ones (a Content-Length that is
# not the body's lets the rest of the body be read as the next request on a pooled
# connection) and hop-by-hop ones are set by the HTTP client; credentials go only through
# ``api_key_env`` (never in the file) and only the upstream's own key is scrubbed from what
# an upstream echoes, so a forwarded client key (a gateway key) would reach logs.
OWNED_HEADERS = frozenset(
    {
        "authorization",
        "connection",
        "content-length",
        "host",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "x-api-key",
    }
)


def _size(value: Any) -> Any:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:
            return parse_size(value)
        except SpecError:
            pass
    raise ValueError("a size is a byte count or a string like 64KiB or 1MiB")


Size = Annotated[int, BeforeValidator(_size)]
"""Bytes, written as a count or ``64KiB``, ``1MiB``."""

MOST_BYTES = 2**40
"""The most any size here may be (1 TiB): far past any real use, and short of the C sizes
that a read of one byte more would overflow."""


def _env_name_problem(value: Any) -> str | None:
    # A key pasted where its variable's name goes must not be quoted back (nor anywhere later).
    if isinstance(value, str) and _ENV_NAME.fullmatch(value):
        return None
    return (
        "not an environment variable name (letters, digits and _, not first a digit): name"
        " the variable that holds the secret, never the secret itself"
    )


EnvName = Annotated[str, Screen(_env_name_problem)]
"""The name of an environment variable that holds a secret; a refused one is never quoted."""


def _env_names_problem(value: Any) -> str | None:
    if isinstance(value, list | tuple):
        return None  # each is an EnvName
    return "a list of environment variable names (write [NAME])"


EnvNames = Annotated[tuple[EnvName, ...], Screen(_env_names_problem)]


def _header_name_problem(value: Any) -> str | None:
    if isinstance(value, str) and not _TOKEN.fullmatch(value):
        return "not a header name (letters, digits and !#$%&'*+-.^_`|~; no spaces or colons)"
    return None


HeaderName = Annotated[str, Screen(_header_name_problem, shown=str)]


def _header_value_problem(value: Any) -> str | None:
    if isinstance(value, str) and not _HEADER_VALUE.fullmatch(value):
        return "the value has a CR, LF, NUL or other control character"
    return None


HeaderValue = Annotated[str, Screen(_header_value_problem)]
"""A header's value, which may be a credential: a refused one is never quoted."""


def headers_problem(value: Any) -> str | None:
    return None if isinstance(value, Mapping) else "a map of header names to values"


def _base_url_problem(value: Any) -> str | None:
    if not isinstance(value, str):
        return None
    return url_problem(
        value,
        ("http", "https"),
        no_query="the API path, such as /chat/completions, is added after it",
    )


BaseUrl = Annotated[str, Screen(_base_url_problem, shown=shown_url)]
"""An upstream's base URL; a refused one is quoted without its password or query."""
