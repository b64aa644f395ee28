"""Glass reports on disk: their own files beside the gateway's, with their own byte budget.

Reports used to be appended to the gateway's stream recording, where each counted as a stream
toward ``recording.rotate_streams``: a flood of tiny posts rotated the files holding real
streams away. Now they go to ``glass-DATE-PID-NNNN.jsonl`` in the same directory, which
``analyze`` reads with the rest (a stream's vantage points join by id across files), and the
stream recorder never counts or deletes them, nor this one a stream file.

All the glass files in the directory, every worker's, share ``max_disk_bytes``: a file takes
new reports until it holds an eighth of that (a larger report gets a file of its own), and
when a worker starts a new one it removes the oldest glass files until the rest and the new
one's eighth (or that report) fit. With N workers the directory holds at most the budget
plus N - 1 files being written. Each report is encoded
whole, then written with one ``write`` to a file opened for appending, so a crash loses at
most that report; a write the disk cuts short is undone, so the reports after it are not
appended to a cut line. No file is held open between reports.
"""

from __future__ import annotations

import io
import os
import time
from collections.abc import Sequence
from pathlib import Path

from steadystream.files import write_jsonl
from steadystream.timeline import Timeline

__all__ = ["GLASS_FILE_PREFIX", "GlassRecorder"]

GLASS_FILE_PREFIX = "glass-"
_FILE_SHARE = 8  # a file holds at most this fraction of the budget


class GlassRecorder:
    """Rotating glass files in ``directory`` within ``max_disk_bytes`` (module docstring)."""

    def __init__(
        self, directory: str | os.PathLike[str], *, max_disk_bytes: int, keep_text: bool = False
    ) -> None:
        self.directory = Path(directory)
        self.max_disk_bytes = max_disk_bytes
        self.file_bytes = max(1, max_disk_bytes // _FILE_SHARE)
        self.keep_text = keep_text
        self.path: Path | None = None
        self._serial = 0

    def write(self, timelines: Sequence[Timeline]) -> None:
        """Append one report's timelines (one write), starting a new file when this one is
        full (or gone: pruned by another worker)."""
        buffer = io.BytesIO()
        write_jsonl(buffer, timelines, keep_text=self.keep_text)
        data = buffer.getvalue()
        size = None if self.path is None else _size(self.path)
        if size is None or (size and size + len(data) > self.file_bytes):
            # A report larger than a file's share gets a file of its own, its size reserved.
            self._start_file(room=max(self.file_bytes, len(data)))
        assert self.path is not None
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            start = os.fstat(fd).st_size  # (a worker's file is written by that worker alone)
            try:
                _write_all(fd, data)
            except OSError:
                # A full disk writes part of a report; the next one appended after that cut
                # line would make the file unreadable (a cut line is tolerated only at the
                # end), every report before it lost with it: the cut is undone, else the next
                # report starts a new file, this one keeping its cut line at its end.
                if not _cut_back(fd, start):
                    self.path = None
                raise
        finally:
            os.close(fd)

    def _start_file(self, room: int) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._serial += 1
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime())
        name = f"{GLASS_FILE_PREFIX}{stamp}-{os.getpid()}-{self._serial:04d}.jsonl"
        self.path = self.directory / name
        self._prune(room)

    def _prune(self, room: int) -> None:
        """Remove the oldest glass files until the others and ``room`` fit the budget."""
        files = []
        for path in self.directory.glob(f"{GLASS_FILE_PREFIX}*.jsonl"):
            size = _size(path)
            if size is not None and path != self.path:
                files.append((path.name, path, size))
        files.sort()  # oldest first: the name starts with the UTC time it was started
        total = sum(size for _, _, size in files) + room
        for _, path, size in files:
            if total <= self.max_disk_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _cut_back(fd: int, size: int) -> bool:
    try:
        os.ftruncate(fd, size)
    except OSError:
        return False
    return True


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None
