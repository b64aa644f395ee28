"""The chat dialect (OpenAI Chat Completions and Completions streams), of the build that runs.

The dialect itself is :mod:`steadystream.protocol._chat_py`, compiled by Cython where the
package was built with a compiler (:mod:`steadystream._build`).
"""

from __future__ import annotations

import steadystream.protocol._chat_py as _chat_py
from steadystream._build import twin
from steadystream.protocol.dialect import Dialect

__all__ = ["chat_dialect"]


def chat_dialect() -> Dialect:
    """A chat dialect for one stream, of the build that runs now (``STEADYSTREAM_NATIVE``)."""
    dialect: Dialect = twin(_chat_py).ChatDialect()
    return dialect
