"""Headless Chromium over the DevTools protocol: open a report, read what the page did.

Chart images are drawn by the browser itself (plotly.js's ``toImage`` in the page), so they
match the interactive report and need nothing but a Chromium: the Debian package
``chromium`` works offline. The protocol is spoken over aiohttp's websocket client; no
browser-driver package is involved.

Chromium is found as ``$STEADYSTREAM_CHROMIUM``, else ``chromium``, ``chromium-browser``,
``google-chrome`` or ``google-chrome-stable`` on PATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from steadystream._exceptions import BrowserError
from steadystream._transport_errors import TRANSPORT_ERRORS

__all__ = ["CHROMIUM_FLAGS", "BrowserError", "Page", "find_chromium", "open_page"]

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",  # containers and root, where the sandbox cannot start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
)
_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
_LISTENING = re.compile(rb"DevTools listening on (ws://\S+)")
_LOCAL_SCHEMES = ("file:", "data:", "about:", "blob:", "chrome", "devtools:")


def find_chromium() -> str | None:
    """The Chromium executable to use, or None when there is none."""
    chosen = os.environ.get("STEADYSTREAM_CHROMIUM")
    if chosen:
        return chosen if shutil.which(chosen) else None
    for name in _NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


@dataclass
class Page:
    """One tab, attached through a flat DevTools session; it records what the page reports."""

    _connection: _Connection
    _session: str
    console_errors: list[str] = field(default_factory=list)
    # plotly.js logs its warnings with console.trace ("WARN: ..."), not console.warn
    console_warnings: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)  # URLs the page asked the network for

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        return await self._connection.call(method, params, session=self._session)

    async def evaluate(self, expression: str) -> Any:
        """Evaluate JavaScript, awaiting a promise; raise :class:`BrowserError` if it throws."""
        result = await self.call(
            "Runtime.evaluate", expression=expression, awaitPromise=True, returnByValue=True
        )
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text")
            raise BrowserError(f"the page failed: {text}")
        return result["result"].get("value")

    async def resize(self, width: int, height: int) -> None:
        await self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )

    def _on_event(self, method: str, params: dict[str, Any]) -> None:
        kind = params.get("type")
        if method == "Runtime.consoleAPICalled" and kind in ("error", "assert", "warning", "trace"):
            args = params.get("args", [])
            text = " ".join(str(a.get("value", a.get("description", ""))) for a in args)
            if kind in ("error", "assert"):
                self.console_errors.append(text)
            else:
                self.console_warnings.append(text)
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            text = details.get("exception", {}).get("description") or details.get("text", "")
            self.console_errors.append(f"uncaught: {text}")
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            self.console_errors.append(params["entry"].get("text", ""))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "warning":
            self.console_warnings.append(params["entry"].get("text", ""))
        elif method == "Network.requestWillBeSent":
            url = params.get("request", {}).get("url", "")
            if not url.startswith(_LOCAL_SCHEMES):
                self.requests.append(url)


@contextlib.asynccontextmanager
async def open_page(
    path: str | os.PathLike[str],
    *,
    width: int = 1280,
    height: int = 900,
    timeout: float = 90.0,
    chromium: str | None = None,
) -> AsyncIterator[Page]:
    """Open the HTML file ``path`` in headless Chromium; yield the page once it has loaded.

    The browser runs in a fresh profile that is removed afterwards, and is stopped on exit.
    """
    executable = chromium or find_chromium()
    if executable is None:
        raise BrowserError(
            "no Chromium found: install it (Debian/Ubuntu: apt-get install chromium) or set"
            " STEADYSTREAM_CHROMIUM to its path"
        )
    url = Path(path).resolve().as_uri()
    try:
        async with asyncio.timeout(timeout), _launch(executable) as connection:
            yield await _load(connection, url, width, height)
    except TimeoutError as exc:
        raise BrowserError(f"Chromium did not finish with {path} within {timeout:g} s") from exc


async def _load(connection: _Connection, url: str, width: int, height: int) -> Page:
    target = await connection.call("Target.createTarget", {"url": "about:blank"})
    attached = await connection.call(
        "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
    )
    page = Page(connection, attached["sessionId"])
    connection.pages[page._session] = page
    for domain in ("Runtime", "Log", "Network", "Page"):
        await page.call(f"{domain}.enable")
    await page.resize(width, height)
    loaded = connection.expect(page._session, "Page.loadEventFired")
    await page.call("Page.navigate", url=url)
    await loaded
    return page


class _Connection:
    """The browser's websocket: commands matched to replies by id, events sent to pages."""

    def __init__(self, socket: aiohttp.ClientWebSocketResponse) -> None:
        self._socket = socket
        self._next_id = 0
        self._replies: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future[None]] = {}
        self.pages: dict[str, Page] = {}
        self.reader = asyncio.create_task(self._read())

    async def call(
        self, method: str, params: dict[str, Any], *, session: str | None = None
    ) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        reply: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._replies[self._next_id] = reply
        await self._socket.send_json(message)
        return await reply

    def expect(self, session: str, method: str) -> asyncio.Future[None]:
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters[(session, method)] = waiter
        return waiter

    async def _read(self) -> None:
        async for message in self._socket:
            if message.type is not aiohttp.WSMsgType.TEXT:
                break
            data = message.json()
            if "id" in data:
                reply = self._replies.pop(data["id"], None)
                if reply is None or reply.done():
                    continue
                if "error" in data:
                    reply.set_exception(BrowserError(f"DevTools: {data['error'].get('message')}"))
                else:
                    reply.set_result(data.get("result", {}))
                continue
            session, method = data.get("sessionId", ""), data.get("method", "")
            page = self.pages.get(session)
            if page is not None:
                page._on_event(method, data.get("params", {}))
            waiter = self._waiters.pop((session, method), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        closed = BrowserError("Chromium closed the DevTools connection")
        pending: list[asyncio.Future[Any]] = [*self._replies.values(), *self._waiters.values()]
        for future in pending:
            if not future.done():
                future.set_exception(closed)


@contextlib.asynccontextmanager
async def _launch(executable: str) -> AsyncIterator[_Connection]:
    with tempfile.TemporaryDirectory(prefix="steadystream-chromium-") as profile:
        process = await asyncio.create_subprocess_exec(
            executable,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-port=0",
            "about:blank",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,  # its helper processes share a group we can stop
        )
        drain: asyncio.Task[None] | None = None
        try:
            ws_url = await _devtools_url(process)
            # Chromium blocks once a full pipe is not read: keep reading what it logs.
            drain = asyncio.create_task(_drain(process))
            async with (
                aiohttp.ClientSession() as http,
                http.ws_connect(ws_url, max_msg_size=0) as socket,
            ):
                connection = _Connection(socket)
                try:
                    yield connection
                finally:
                    connection.reader.cancel()
        except TRANSPORT_ERRORS as exc:
            raise BrowserError(f"could not talk to Chromium ({executable}): {exc}") from exc
        finally:
            await _stop(process)
            if drain is not None:
                drain.cancel()


async def _devtools_url(process: asyncio.subprocess.Process) -> str:
    assert process.stderr is not None
    seen: list[bytes] = []
    while True:
        line = await process.stderr.readline()
        if not line:
            tail = b"".join(seen[-10:]).decode(errors="replace").strip()
            raise BrowserError(f"Chromium exited before it listened for DevTools: {tail}")
        seen.append(line)
        match = _LISTENING.search(line)
        if match:
            return match.group(1).decode()


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stderr is not None
    while await process.stderr.read(65536):
        pass


async def _stop(process: asyncio.subprocess.Process) -> None:
    if process.returncode is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), 5)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        await process.wait()
