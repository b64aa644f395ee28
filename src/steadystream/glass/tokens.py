"""Glass tokens: a page may report on a stream only with the token its answer carried.

Anyone the gateway admits could otherwise post a client and a glass timeline for any stream
id, another tenant's included, as often as they liked, and ``analyze`` would report them as
that stream's edges. So the gateway hands each answer it relays a token in the
``X-Steadystream-Glass-Token`` response header, and takes a report only with a token that
names the report's stream id and the poster's tenant and has not expired::

    1.<expires, unix s>.<HMAC-SHA256, base64url>.<stream id>

The MAC covers the tenant, the stream id and the expiry, keyed with a secret only the gateway
holds (the same in all its workers: docs/gateway.md, ``glass.secret_env``); it is compared in
constant time. The stream id is in the clear so that a post can be checked before its body
is read. Time is a callable of Unix seconds, so tests run it on a fake clock.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass

from steadystream._api_errors import ApiError, is_client_id

__all__ = ["GLASS_TOKEN_HEADER", "GlassTokens", "Ticket"]

GLASS_TOKEN_HEADER = "X-Steadystream-Glass-Token"
_HEADER = GLASS_TOKEN_HEADER.lower().encode()
_VERSION = "1"
_CONTEXT = b"steadystream.glass-token/1"  # a MAC of this secret means nothing elsewhere
_MAC_CHARS = 43  # 32 bytes, base64url without padding
MIN_SECRET_BYTES = 32


@dataclass(frozen=True, slots=True)
class Ticket:
    """What a good token proves: this tenant was served this stream; good until ``expires``."""

    stream_id: str
    tenant: str
    expires: int  # Unix seconds
    mac: str  # the token's MAC: what a report is counted once by


class GlassTokens:
    """Mints the tokens the gateway hands out and checks the ones posted back."""

    __slots__ = ("_secret", "now_s", "ttl_s")

    def __init__(self, secret: bytes, ttl_s: int, now_s: Callable[[], float]) -> None:
        if len(secret) < MIN_SECRET_BYTES:
            raise ValueError(f"a glass token secret needs {MIN_SECRET_BYTES} bytes or more")
        self._secret = secret
        self.ttl_s = ttl_s
        self.now_s = now_s  # Unix seconds

    def __repr__(self) -> str:  # never the secret
        return f"<GlassTokens ttl_s={self.ttl_s}>"

    def mint(self, stream_id: str, tenant: str) -> str:
        """The token for ``tenant``'s stream ``stream_id``, good for ``ttl_s`` from now."""
        expires = int(self.now_s()) + self.ttl_s
        return f"{_VERSION}.{expires}.{self._mac(stream_id, tenant, expires)}.{stream_id}"

    def header(self, stream_id: str, tenant: str) -> tuple[bytes, bytes]:
        """The token as an ASGI response header."""
        return _HEADER, self.mint(stream_id, tenant).encode()

    def check(self, token: str | None, tenant: str) -> Ticket:
        """The ticket a posted token stands for; :class:`ApiError` (403) when it is missing,
        not one of ours, another tenant's or expired. The token is never quoted back."""
        if not token:
            raise _refused(
                f"a glass report needs the {GLASS_TOKEN_HEADER} header that the answer it"
                " reports on carried",
                "glass_token_missing",
            )
        version, _, rest = token.partition(".")
        expires_text, _, rest = rest.partition(".")
        mac, _, stream_id = rest.partition(".")
        if (
            version != _VERSION
            or not (expires_text.isascii() and expires_text.isdigit())  # not '²': int() fails
            or len(expires_text) > 12
            or len(mac) != _MAC_CHARS
            or not is_client_id(stream_id)
        ):
            raise _refused(f"{GLASS_TOKEN_HEADER} is not a glass token", "glass_token_invalid")
        expires = int(expires_text)
        if not hmac.compare_digest(mac, self._mac(stream_id, tenant, expires)):
            raise _refused(
                f"{GLASS_TOKEN_HEADER} was not handed to this caller (another tenant's, or"
                " another gateway's)",
                "glass_token_invalid",
            )
        if expires < self.now_s():
            raise _refused(
                f"{GLASS_TOKEN_HEADER} has expired: a report must come within glass.token_ttl"
                " of its answer",
                "glass_token_expired",
            )
        return Ticket(stream_id, tenant, expires, mac)

    def _mac(self, stream_id: str, tenant: str, expires: int) -> str:
        message = b"\0".join((_CONTEXT, tenant.encode(), stream_id.encode(), str(expires).encode()))
        digest = hmac.new(self._secret, message, hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _refused(message: str, code: str) -> ApiError:
    return ApiError(403, message, param=GLASS_TOKEN_HEADER, type="permission_error", code=code)
