"""One report per token: the tokens already used, kept until they expire.

A token (:mod:`steadystream.glass.tokens`) is good for one report. The gateway's workers
share a port, so a page's second post may reach another worker than its first: with a
recording directory, a used token is an empty marker file made with ``O_CREAT | O_EXCL`` (the
kernel lets one of two racing workers make it), under a folder per minute of expiry; a
folder whose tokens have all expired is removed whole, since an expired token is refused
anyway. There is one marker per report taken in the last ``glass.token_ttl``, and each
report needs a stream the gateway served. Without a directory (a recorder passed in by a
program, one process) the used tokens are a bounded set in memory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Protocol

from steadystream._api_errors import ApiError
from steadystream.glass.tokens import Ticket

__all__ = ["MarkerClaims", "MemoryClaims", "TokenClaims"]

_BUCKET_S = 60


class TokenClaims(Protocol):
    """Where used tokens are kept."""

    def claim(self, ticket: Ticket, now_s: float) -> None:
        """Mark ``ticket`` used; :class:`ApiError` 409 if it was already."""
        ...


def _taken(ticket: Ticket) -> ApiError:
    return ApiError(
        409,
        f"a glass report for stream {ticket.stream_id!r} was already taken with this token:"
        " one report per answer",
        param="stream_id",
        code="glass_report_taken",
    )


def _unavailable(exc: OSError) -> ApiError:
    return ApiError(
        503,
        f"used glass tokens cannot be kept in the recording directory: {exc.strerror or exc}",
        code="glass_unavailable",
    )


def _make(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unavailable(exc) from exc


def _marker_name(ticket: Ticket) -> str:
    return hashlib.sha256(ticket.mac.encode()).hexdigest()[:40]


class MarkerClaims:
    """Used tokens as marker files under ``directory`` (shared by processes)."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._pruned_bucket = -1

    def claim(self, ticket: Ticket, now_s: float) -> None:
        self._prune(now_s)
        bucket = self.directory / str(ticket.expires // _BUCKET_S)
        marker = bucket / _marker_name(ticket)
        for _ in range(2):
            try:
                os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
                return
            except FileExistsError:
                raise _taken(ticket) from None
            except FileNotFoundError:  # the minute's folder is new (or was just pruned)
                _make(bucket)
            except OSError as exc:  # a full disk, a folder not ours: no report without it
                raise _unavailable(exc) from exc
        raise _taken(ticket)  # made and removed again under us: the token has just expired

    def _prune(self, now_s: float) -> None:
        """Remove the folders whose every token has expired (once a minute at most)."""
        current = int(now_s) // _BUCKET_S
        if current == self._pruned_bucket:
            return
        self._pruned_bucket = current
        try:
            names = os.listdir(self.directory)
        except OSError:  # none yet (or unreadable: the claim says so)
            return
        for name in names:
            # A folder holds tokens expiring in [name * 60, name * 60 + 60): all expired
            # once that is past.
            if name.isdigit() and (int(name) + 1) * _BUCKET_S <= now_s:
                shutil.rmtree(self.directory / name, ignore_errors=True)


class MemoryClaims:
    """Used tokens in memory, at most ``max_claims`` of them (one process)."""

    def __init__(self, max_claims: int = 100_000) -> None:
        self.max_claims = max_claims
        self._buckets: dict[int, set[str]] = {}
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def claim(self, ticket: Ticket, now_s: float) -> None:
        for bucket in [b for b in self._buckets if (b + 1) * _BUCKET_S <= now_s]:
            self._count -= len(self._buckets.pop(bucket))
        used = self._buckets.setdefault(ticket.expires // _BUCKET_S, set())
        if ticket.mac in used:
            raise _taken(ticket)
        if self._count >= self.max_claims:
            raise ApiError(
                503,
                f"{self.max_claims} glass reports are waiting for their tokens to expire;"
                " try again later",
                code="glass_busy",
            )
        used.add(ticket.mac)
        self._count += 1
