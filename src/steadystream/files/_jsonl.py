"""JSONL timeline files, plain or gzip-compressed: writing line by line, reading block by block.

Reading goes a few megabytes at a time: one orjson parse per line (``_records``), then the
event arrays of the whole block are checked and cut into timelines at once (``_blocks``), so
timelines read from one block share its arrays, each holding a slice.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from types import TracebackType
from typing import IO, Any, TypeAlias

import orjson

from steadystream._exceptions import InputError, TimelineFormatError
from steadystream._replace import replaced
from steadystream.files._records import decode_lines, encode_records
from steadystream.timeline import Timeline

__all__ = [
    "JsonlReader",
    "JsonlWriter",
    "PathLike",
    "ReadResult",
    "iter_jsonl",
    "read_jsonl",
    "write_jsonl",
]

PathLike: TypeAlias = str | os.PathLike[str]

MAX_LINE_BYTES = 256 << 20  # one stream's record (a 4-million-event stream is ~60 MiB)
_BLOCK_BYTES = 8 << 20  # large enough to amortise numpy calls, small enough to bound memory
_WRITE_BATCH = 1024
_GZIP_MAGIC = b"\x1f\x8b"
_DUMP_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


@dataclass(frozen=True, slots=True)
class ReadResult:
    """The timelines of a file, and the line number of a cut-off last line (None: no cut)."""

    timelines: list[Timeline]
    truncated_line: int | None = None


# -- writing ----------------------------------------------------------------------------------


def write_jsonl(
    path_or_file: PathLike | IO[bytes] | IO[str],
    timelines: Iterable[Timeline],
    *,
    keep_text: bool = False,
) -> int:
    """Write one JSON line per timeline and return how many were written.

    A path ending in ``.gz`` is gzip-compressed; an existing file is replaced. Text is stored
    only with ``keep_text=True``. Keys in ``labels`` and ``meta`` that name credentials
    (authorization, api key, password, secret, cookie, tokens of access) are dropped.
    """
    if isinstance(path_or_file, str | os.PathLike):
        name = os.fspath(path_or_file)
        # Into a file beside it, moved over it at the end: a refused stream (or a full disk)
        # leaves the file that was there. (JsonlWriter appends, and keeps what it wrote.)
        with replaced(name) as temp, open(temp, "wb") as raw, _compressing(raw, name) as file:
            return _write_lines(file.write, timelines, keep_text)
    if isinstance(path_or_file, io.TextIOBase):
        text_file = path_or_file
        return _write_lines(lambda data: text_file.write(data.decode()), timelines, keep_text)
    return _write_lines(path_or_file.write, timelines, keep_text)  # type: ignore[arg-type]


class JsonlWriter:
    """Append timelines to a JSONL file one line at a time, flushing each line.

    A process that dies loses no finished stream. With ``append=True`` an existing plain file
    is continued; a last line that an earlier crash cut off is removed first (it could never be
    read), and :attr:`dropped_bytes` says how much was removed. One writer per file.
    """

    def __init__(self, path: PathLike, *, keep_text: bool = False, append: bool = False) -> None:
        self.path = os.fspath(path)
        self.keep_text = keep_text
        self.written = 0
        self.dropped_bytes = 0
        if append:
            self.dropped_bytes = _drop_cut_line(self.path)
        self._file = _open_for_writing(self.path, append=append)

    def write(self, timeline: Timeline) -> None:
        (line,) = _encode_lines([timeline], self.keep_text)
        self._file.write(line)
        self._file.flush()
        self.written += 1

    def close(self) -> None:
        self._file.close()

    def __enter__(self) -> JsonlWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def _compressing(raw: IO[bytes], path: str) -> IO[bytes]:
    """``raw``, gzip-compressed when ``path`` ends in ``.gz`` (its name in the gzip header)."""
    if not path.endswith(".gz"):
        return raw
    # Level 1: five times faster than the default 6, for files about a tenth larger.
    return gzip.GzipFile(filename=path, mode="wb", compresslevel=1, fileobj=raw)  # type: ignore[return-value]


def _open_for_writing(path: str, *, append: bool) -> io.BufferedIOBase:
    if path.endswith(".gz"):
        if append:
            raise InputError(f"{path}: append needs a plain .jsonl file, not gzip")
        # Level 1: five times faster than the default 6, for files about a tenth larger.
        return gzip.open(path, "wb", compresslevel=1)
    return open(path, "ab" if append else "wb")


def _drop_cut_line(path: str) -> int:
    try:
        file = open(path, "r+b")  # noqa: SIM115 - closed below
    except FileNotFoundError:
        return 0
    with file:
        size = file.seek(0, os.SEEK_END)
        end = size
        # Walk back a block at a time to the last newline; most files end with one.
        while end > 0:
            start = max(0, end - 65536)
            file.seek(start)
            piece = file.read(end - start)
            if end == size and piece.endswith(b"\n"):
                return 0
            newline = piece.rfind(b"\n")
            if newline >= 0:
                end = start + newline + 1
                break
            end = start
        file.seek(end)
        tail = file.read()
        try:
            orjson.loads(tail)
        except orjson.JSONDecodeError:
            file.truncate(end)
            return size - end
        file.write(b"\n")  # a whole line that only lacks its newline: keep it
        return 0


def _write_lines(
    write: Callable[[bytes], object], timelines: Iterable[Timeline], keep_text: bool
) -> int:
    count = 0
    batch: list[Timeline] = []
    for timeline in timelines:
        batch.append(timeline)
        if len(batch) == _WRITE_BATCH:
            write(b"".join(_encode_lines(batch, keep_text)))
            count += len(batch)
            batch = []
    if batch:
        write(b"".join(_encode_lines(batch, keep_text)))
    return count + len(batch)


def _encode_lines(batch: list[Timeline], keep_text: bool) -> list[bytes]:
    records = encode_records(batch, keep_text)
    lines = []
    for timeline, record in zip(batch, records, strict=True):
        try:
            lines.append(orjson.dumps(record, option=_DUMP_OPTIONS, default=_array_to_list))
        except orjson.JSONEncodeError as exc:
            raise InputError(f"stream {timeline.stream_id!r} cannot be written: {exc}") from exc
    return lines


def _array_to_list(value: Any) -> Any:
    # orjson serialises only C-contiguous arrays natively; strided views come here.
    tolist = getattr(value, "tolist", None)
    if tolist is not None:
        return tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serialisable")


# -- reading ----------------------------------------------------------------------------------


def read_jsonl(path: PathLike) -> ReadResult:
    """Load every stream of a JSONL file (plain or gzip, found by its first bytes).

    A last line cut off mid-way (no newline, not valid JSON) is reported in
    :attr:`ReadResult.truncated_line`; any other bad line raises :class:`TimelineFormatError`.
    """
    reader = JsonlReader(path)
    timelines = list(reader)
    return ReadResult(timelines, reader.truncated_line)


def iter_jsonl(path: PathLike) -> JsonlReader:
    """Stream the timelines of a JSONL file without holding them all."""
    return JsonlReader(path)


class JsonlReader:
    """An iterator over the timelines of a JSONL file, read a block of lines at a time.

    The file is opened on the first ``next()`` and closed at the end (or by :meth:`close`).
    Once iteration ends, :attr:`truncated_line` holds the number of a cut-off last line.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = os.fspath(path)
        self.truncated_line: int | None = None
        self._timelines = self._read()

    def __iter__(self) -> JsonlReader:
        return self

    def __next__(self) -> Timeline:
        return next(self._timelines)

    def close(self) -> None:
        self._timelines.close()

    def __enter__(self) -> JsonlReader:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _read(self) -> Generator[Timeline, None, None]:
        path = self.path
        done = 0  # lines handled so far
        tail = b""
        for chunk in _chunks(path):
            data = tail + chunk if tail else chunk
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            if len(tail) > MAX_LINE_BYTES:  # (a line with no end, or a decompression bomb)
                raise TimelineFormatError(
                    f"a line longer than {MAX_LINE_BYTES >> 20} MiB; not a timeline file",
                    path=path,
                    line=done + 1,
                )
            if cut:
                lines = data[: cut - 1].split(b"\n")
                yield from decode_lines(lines, done + 1, path)
                done += len(lines)
        if not tail.strip():
            return
        try:
            orjson.loads(tail)
        except orjson.JSONDecodeError:
            if not done and not tail.lstrip().startswith(b"{"):
                # No whole line before it, and not the start of a record: bytes, not a run
                # whose recorder crashed mid-record.
                raise TimelineFormatError(
                    "not JSON, and no complete line before it; not a timeline file",
                    path=path,
                    line=1,
                ) from None
            self.truncated_line = done + 1
            return
        yield from decode_lines([tail], done + 1, path)


def _chunks(path: str) -> Iterator[bytes]:
    return read_blocks(path, _BLOCK_BYTES)


def read_blocks(path: str, size: int) -> Iterator[bytes]:
    """The file's bytes ``size`` at a time, gzip inflated (found by its first bytes).

    zlib directly rather than GzipFile: a file cut by a crash yields all it holds, where
    GzipFile raises and drops the block it was reading. At most ``size`` comes out of each
    call: a small file that inflates to gigabytes (a bomb) is read a block at a time, and
    refused by its reader's bounds, not inflated whole first. (Peers' files too.)
    """
    try:
        file = open(path, "rb")  # noqa: SIM115 - closed by the with below
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}") from exc
    with file:
        try:
            raw = file.read(size)
            if not raw.startswith(_GZIP_MAGIC):
                while raw:
                    yield raw
                    raw = file.read(size)
                return
            inflate = zlib.decompressobj(wbits=31)
            held = False  # zlib holds more output for the input it took
            while raw or held:
                if inflate.eof:  # members back to back (cat a.gz b.gz) are one file
                    inflate = zlib.decompressobj(wbits=31)
                out = inflate.decompress(raw, size)
                held = len(out) == size and not inflate.eof
                raw = inflate.unused_data if inflate.eof else inflate.unconsumed_tail
                if out:
                    yield out
                if not raw and not held:
                    raw = file.read(size)
        except zlib.error as exc:
            raise TimelineFormatError(f"not a valid gzip file ({exc})", path=path) from exc
        except OSError as exc:  # (a read that fails mid-file: a disk error, a directory)
            raise TimelineFormatError(f"cannot be read: {exc}", path=path) from exc
