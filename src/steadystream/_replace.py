"""Write a file whole or not at all: a new file beside it, moved over it on success.

Whoever writes a file a person keeps (a run's timelines, a report) writes it here: a write
that fails (a full disk, a refused stream, Ctrl-C) leaves the file that was there.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator

__all__ = ["replaced"]


@contextlib.contextmanager
def replaced(path: str) -> Iterator[str]:
    """A new file's path beside ``path``, moved over ``path`` when the block ends without error.

    A write that fails leaves the file that was there, whole, never a part of a new one: the
    new file is removed. A replaced file keeps its permissions. A path that is no regular file
    (``/dev/null``, a FIFO) cannot be replaced, and is written directly.
    """
    target = os.path.realpath(path)  # through a symbolic link, as open() goes
    if os.path.exists(target) and not os.path.isfile(target):
        yield path
        return
    folder, name = os.path.split(target)
    temp = _create_beside(folder, name, path)
    try:
        yield temp
        with contextlib.suppress(FileNotFoundError):
            os.chmod(temp, stat.S_IMODE(os.stat(target).st_mode))
        os.replace(temp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def _create_beside(folder: str, name: str, path: str) -> str:
    """An empty new file in ``folder``, hidden, made with the mode open() would give it."""
    while True:
        temp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
        try:
            os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
        except FileExistsError:
            continue
        except OSError as exc:  # named for the file asked for, not the temporary one
            raise OSError(exc.errno, exc.strerror, path) from None
        return temp
