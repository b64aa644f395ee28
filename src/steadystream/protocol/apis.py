"""The APIs a stream comes through, and the dialect that reads each (protocol/dialect.py).

===========  ======================  ================================================
API          path under the base URL  dialect
===========  ======================  ================================================
chat         ``/chat/completions``   :func:`~steadystream.protocol.chat.chat_dialect`
completions  ``/completions``        the same (the completions chunk shape)
responses    ``/responses``          :class:`~.responses.ResponsesDialect`
messages     ``/messages``           :class:`~.messages.MessagesDialect`
===========  ======================  ================================================
"""

from __future__ import annotations

from typing import Literal, get_args

from steadystream.protocol.chat import chat_dialect
from steadystream.protocol.dialect import Dialect
from steadystream.protocol.messages import MessagesDialect
from steadystream.protocol.responses import ResponsesDialect

__all__ = ["API_NAMES", "API_PATHS", "Api", "api_of_path", "new_dialect"]

Api = Literal["chat", "completions", "responses", "messages"]
API_NAMES: tuple[Api, ...] = get_args(Api)
API_PATHS: dict[Api, str] = {
    "chat": "/chat/completions",
    "completions": "/completions",
    "responses": "/responses",
    "messages": "/messages",
}
"""Each API's path, under a base URL that ends in ``/v1``."""


def new_dialect(api: Api | str) -> Dialect:
    """A dialect for one stream of ``api`` (raises ValueError naming the known ones)."""
    if api in ("chat", "completions"):
        return chat_dialect()
    if api == "responses":
        return ResponsesDialect()
    if api == "messages":
        return MessagesDialect()
    raise ValueError(f"unknown API {api!r}: one of {', '.join(API_NAMES)}")


def api_of_path(path: str) -> Api | None:
    """The API a request path is for (``/v1/messages`` → ``messages``), or None."""
    for api, suffix in API_PATHS.items():
        if path.rstrip("/").endswith(suffix) and not (
            api == "completions" and path.rstrip("/").endswith("/chat/completions")
        ):
            return api
    return None
