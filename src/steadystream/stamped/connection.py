"""One streamed HTTP/1.1 exchange whose body arrives with each read's arrival stamp.

The connection itself is in :mod:`steadystream.stamped._connection_py`, compiled by Cython
where the package was built with a compiler (:mod:`steadystream._build`):
:func:`connection_type` is the build that runs, chosen per connection.
"""

from __future__ import annotations

import steadystream.stamped._connection_py as _connection_py
from steadystream._build import twin
from steadystream.stamped._connection_py import BodySink, StampedConnection

__all__ = ["BodySink", "StampedConnection", "connection_type"]


def connection_type() -> type[StampedConnection]:
    """The class of the build that runs: compiled where built and wanted, else Python."""
    chosen: type[StampedConnection] = twin(_connection_py).StampedConnection
    return chosen
