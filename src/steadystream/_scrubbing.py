"""Keys out of everything that leaves the gateway or a load test: :class:`KeyScrubber`.

A server may echo its key (a provider quoting its ``Authorization`` header in an error, a
model repeating most of a key it was shown), plain or spelled in JSON escapes. The gateway
hides every upstream and gateway key, and every long enough run of a key's first characters,
in the bytes bound for a client and in the text of its logs, recordings and metrics
(:meth:`~steadystream.gateway.upstreams.UpstreamPool.redact`): one scrubber for both, so
what a client may not see is not logged either. ``steadystream bench`` hides the key and the
credential headers it sends in what the server says back (its errors, a kept answer) before
they reach a timeline file (:meth:`~steadystream.bench.endpoint.Endpoint.scrubber`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

__all__ = ["MIN_HIDDEN_KEY_CHARS", "KeyScrubber", "hidden_key", "one_line"]

# A JSON string may spell any character as an escape (``\u0073k-...``, ``\/``): the client's
# parser restores it, so a key written that way is a key sent. Escapes are matched left to
# right, two characters at a time, so an escaped backslash is never taken for an escape's start.
_ESCAPED_BYTES = re.compile(rb"\\(u00[2-7][0-9a-fA-F]|.)", re.DOTALL)
_ASCII_ESCAPE_BYTES = re.compile(rb"\\(?:u00[2-7]|/)")
_KEY_START = 8  # the characters of a key that, quoted cut short, are hidden all the same
MIN_HIDDEN_KEY_CHARS = _KEY_START
"""A key shorter than this is a placeholder (vLLM's ``EMPTY``, an ``x``), not a secret: it
is not scrubbed, since its every occurrence in every answer would become ``***`` (a short
real key is no secret either: it can be guessed)."""
_KEEP_ESCAPED = frozenset('"\\')  # these stay escaped: unescaped, they would end the string
# Line breaks and other controls (C0, DEL, C1, the Unicode line and paragraph separators): in
# a server's words they would start a forged line in a log, or move a terminal's cursor.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]+")
# A lone surrogate is what Python makes of bytes that are not UTF-8 (aiohttp reads a status
# line "surrogateescape"): no UTF-8 writer takes it (orjson, a log file), so it is U+FFFD.
_SURROGATES = re.compile("[\ud800-\udfff]")


def one_line(text: str) -> str:
    """``text`` (a server's message) as one line: each run of controls is one space, and
    each lone surrogate (bytes that were not UTF-8) is U+FFFD, so it can be written."""
    text = _CONTROLS.sub(" ", text)
    return _SURROGATES.sub("\ufffd", text) if not text.isascii() else text


def hidden_key(key: str) -> bool:
    """Whether ``key`` is scrubbed: every key that can be a secret (see
    :data:`MIN_HIDDEN_KEY_CHARS`)."""
    return len(key) >= MIN_HIDDEN_KEY_CHARS


class KeyScrubber:
    """Hides keys in bytes: each key, and each run of a key's first characters (at least
    ``_KEY_START``), written plain or JSON-escaped, becomes ``***``.

    One scrubber for everything that leaves the gateway: bytes bound for a client, and the
    text of logs, recordings and metrics (:meth:`UpstreamPool.redact`). A key quoted cut
    short (an 80-character preview of a bad chunk, a model repeating most of a key) is
    hidden from its start on. One substring search per key and call when no key is there.
    A key cut across two events is beyond it (the second event holds no key's start); an
    upstream that echoes a key sends it whole. :class:`UpstreamPool` gives it no key shorter
    than :data:`MIN_HIDDEN_KEY_CHARS`.
    """

    __slots__ = ("_keys",)

    def __init__(self, keys: Sequence[bytes]) -> None:
        self._keys = [(key[:_KEY_START], key) for key in keys if key]

    def text(self, text: str) -> str:
        """``text`` with the keys hidden, as its UTF-8 bytes would have them."""
        data = text.encode("utf-8", "surrogatepass")
        scrubbed = self(data)
        return text if scrubbed is data else scrubbed.decode("utf-8", "surrogatepass")

    def __call__(self, data: bytes) -> bytes:
        keys = self._keys
        # Only an ASCII \u00XX and \/ can spell a key's characters (\n, \", a \u4e2d cannot):
        # most answers with escapes skip the rewrite.
        if b"\\" in data and _ASCII_ESCAPE_BYTES.search(data):
            plain = _ESCAPED_BYTES.sub(_unescape_bytes, data)
            if any(start in plain for start, _ in keys):
                data = plain  # still valid JSON: only harmless escapes were undone
        for start, key in keys:
            if start in data:
                data = _hide_key_starts(data, start, key)
        return data


def _hide_key_starts(data: bytes, start: bytes, key: bytes) -> bytes:
    """``data`` with every run of ``key``'s first characters (``start`` at least) hidden."""
    at = data.find(start)
    while at >= 0:
        end = at + len(start)
        while end < len(data) and end - at < len(key) and data[end] == key[end - at]:
            end += 1
        data = b"%s***%s" % (data[:at], data[end:])
        at = data.find(start, at + 3)
    return data


def _unescape_bytes(match: re.Match[bytes]) -> bytes:
    escape = match.group(1)
    if escape == b"/":
        return b"/"
    if len(escape) == 5 and chr(code := int(escape[3:], 16)) not in _KEEP_ESCAPED:
        return bytes((code,))
    return match.group(0)
