"""Reading a peer's file: a JSON document whole (within a bound), JSONL a line at a time.

Plain or gzip-compressed, found by the first bytes. Every read has a bound: a document is
refused past :data:`MAX_DOCUMENT_BYTES`, a line past :data:`MAX_LINE_BYTES`, and JSONL is
never held whole, so memory follows the longest record, not the file.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from typing import Any

import orjson

from steadystream._exceptions import InputError, TimelineFormatError

__all__ = [
    "HEAD_BYTES",
    "MAX_DOCUMENT_BYTES",
    "MAX_LINE_BYTES",
    "JsonLines",
    "head",
    "read_documents",
]

MAX_DOCUMENT_BYTES = 1 << 30
"""A JSON document (vLLM's result, GenAI-Perf's export) is parsed whole: at most 1 GiB."""
MAX_LINE_BYTES = 256 << 20
"""One JSONL record (one request of AIPerf's exports): at most 256 MiB."""
HEAD_BYTES = 64 << 10
"""How much of a file is looked at to tell its format."""

_GZIP_MAGIC = b"\x1f\x8b"
_BROKEN = (OSError, EOFError, zlib.error)


def _open(path: str) -> io.BufferedIOBase:
    try:
        with open(path, "rb") as file:
            gzipped = file.read(2) == _GZIP_MAGIC
        if gzipped:
            return gzip.GzipFile(path, "rb")
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc


def head(path: str) -> bytes:
    """The first :data:`HEAD_BYTES` of the file, decompressed as far as they go.

    A gzip file cut short, or broken, gives what it holds (maybe nothing): telling the
    format must not fail where reading would report the cut.
    """
    try:
        with open(path, "rb") as file:
            raw = file.read(HEAD_BYTES)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    if not raw.startswith(_GZIP_MAGIC):
        return raw
    try:
        return zlib.decompressobj(wbits=31).decompress(raw, HEAD_BYTES)
    except zlib.error:
        return b""


def read_documents(path: str) -> list[Any]:
    """The JSON documents of the file: one, or one a line where a tool appended runs to one
    file (``vllm bench serve --append-result``); refused past :data:`MAX_DOCUMENT_BYTES`."""
    with _open(path) as file:
        try:
            data = file.read(MAX_DOCUMENT_BYTES + 1)
        except _BROKEN as exc:
            raise TimelineFormatError(f"cannot be read: {exc}", path=path) from exc
    if len(data) > MAX_DOCUMENT_BYTES:
        raise TimelineFormatError(
            f"over {MAX_DOCUMENT_BYTES >> 20} MiB: a JSON document is read whole, and no more"
            " than that is; split the run into several files",
            path=path,
        )
    try:
        return [orjson.loads(data)]
    except orjson.JSONDecodeError as exc:
        if b"\n" not in data.strip():
            raise TimelineFormatError(f"not valid JSON ({exc})", path=path) from exc
    documents = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            try:
                documents.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise TimelineFormatError(
                    f"not valid JSON ({exc})", path=path, line=number
                ) from exc
    return documents


class JsonLines:
    """The JSON values of a JSONL file with their line numbers, one line at a time.

    Blank lines are skipped. A last line cut off mid-way (no newline, not valid JSON: what a
    tool killed while writing leaves) ends the iteration and is kept in
    :attr:`truncated_line`; any other line that is not JSON is an error naming it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.truncated_line: int | None = None

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        with _open(self.path) as file:
            try:
                yield from self._lines(file)
            except _BROKEN as exc:
                raise TimelineFormatError(f"cannot be read: {exc}", path=self.path) from exc

    def _lines(self, file: io.BufferedIOBase) -> Iterator[tuple[int, Any]]:
        number = 0
        while True:
            line = file.readline(MAX_LINE_BYTES + 1)
            if not line:
                return
            number += 1
            if len(line) > MAX_LINE_BYTES:
                raise TimelineFormatError(
                    f"a line over {MAX_LINE_BYTES >> 20} MiB; no record is read past that",
                    path=self.path,
                    line=number,
                )
            if not line.strip():
                continue
            try:
                value = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                if not line.endswith(b"\n") and not file.read(1):
                    self.truncated_line = number
                    return
                raise TimelineFormatError(
                    f"not valid JSON ({exc})", path=self.path, line=number
                ) from exc
            yield number, value
