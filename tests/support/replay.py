"""What the replay's tests share: an ASGI request scope for calling the app directly."""

from __future__ import annotations

from typing import Any


def http_scope(
    method: str, path: str, headers: list[tuple[bytes, bytes]] | None = None
) -> dict[str, Any]:
    """The scope of one HTTP/1.1 request to ``path``, as uvicorn would hand it to the app."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "server": ("127.0.0.1", 1),
        "client": ("127.0.0.1", 2),
        "headers": headers or [],
    }
