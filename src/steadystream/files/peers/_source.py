"""Reading a peer's file: a JSON document whole (within a bound), JSONL a line at a time.

Plain or gzip-compressed, found by the first bytes. Every read has a bound: a document is
refused past :data:`MAX_DOCUMENT_BYTES`, a line past :data:`MAX_LINE_BYTES`, and JSONL is
never held whole, so memory follows the longest record, not the file.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any

import orjson

from steadystream._exceptions import InputError, TimelineFormatError
from steadystream.files._jsonl import read_blocks

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
_BLOCK_BYTES = 1 << 20


def _blocks(path: str) -> Iterator[bytes]:
    """The file's bytes a block at a time, gzip inflated: a file cut short gives all it
    holds (its last line is then read as a cut one), and one that inflates to gigabytes is
    refused by the bounds, not inflated whole first."""
    return read_blocks(path, _BLOCK_BYTES)


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
    data = bytearray()  # grown in place: no second copy of a document near the bound
    for block in _blocks(path):
        data += block
        if len(data) > MAX_DOCUMENT_BYTES:
            raise TimelineFormatError(
                f"over {MAX_DOCUMENT_BYTES >> 20} MiB: a JSON document is read whole, and no"
                " more than that is; split the run into several files",
                path=path,
            )
    try:
        return [orjson.loads(data)]
    except orjson.JSONDecodeError as exc:
        # One document a line only where the first line is one: an indented document
        # (GenAI-Perf writes one) cut short or broken is reported where it breaks.
        if not _first_line_parses(data):
            raise _not_json(exc, path, 1) from exc
    documents = []
    for number, line in enumerate(data.split(b"\n"), start=1):
        if line.strip():
            try:
                documents.append(orjson.loads(line))
            except orjson.JSONDecodeError as exc:
                raise _not_json(exc, path, number) from exc
    return documents


def _first_line_parses(data: bytearray) -> bool:
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        line = data[start:end]
        if line.strip():
            try:
                orjson.loads(line)
            except orjson.JSONDecodeError:
                return False
            return end < len(data)  # a single line is no list of documents
        start = end + 1
    return False


def _not_json(exc: orjson.JSONDecodeError, path: str, line: int) -> TimelineFormatError:
    """The error of bytes that are not JSON, at the line and column where they break
    (``line`` is where the bytes given to the parser began)."""
    return TimelineFormatError(
        f"not valid JSON ({exc.msg} at column {exc.colno})",
        path=path,
        line=line + exc.lineno - 1,
    )


def _lines(blocks: Iterator[bytes]) -> Iterator[tuple[bytes, bool]]:
    """Each line of the bytes, without its newline, and whether it had one; a line is
    given (longer than :data:`MAX_LINE_BYTES`) as soon as it is past that bound."""
    pending: list[bytes] = []  # the line read so far, in pieces (joined once, when it ends)
    size = 0
    for block in blocks:
        parts = block.split(b"\n")
        if len(parts) == 1:
            pending.append(block)
            size += len(block)
            if size > MAX_LINE_BYTES:
                yield b"".join(pending), False
                return
            continue
        yield (b"".join((*pending, parts[0])) if pending else parts[0]), True
        for part in parts[1:-1]:
            yield part, True
        pending = [parts[-1]] if parts[-1] else []
        size = len(parts[-1])
    if pending:
        yield b"".join(pending), False


class JsonLines:
    """The JSON values of a JSONL file with their line numbers, one line at a time.

    Blank lines are skipped. A last line cut off mid-way (no newline, not valid JSON: what a
    tool killed while writing leaves, gzip-compressed or not) ends the iteration and is kept
    in :attr:`truncated_line`; any other line that is not JSON is an error naming it.
    """

    def __init__(self, path: str) -> None:
        self.path = path
        self.truncated_line: int | None = None

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        for number, (line, ended) in enumerate(_lines(_blocks(self.path)), start=1):
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
                if not ended:  # the last line, cut off
                    self.truncated_line = number
                    return
                raise _not_json(exc, self.path, number) from exc
            yield number, value
