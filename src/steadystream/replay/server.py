"""Running the replay: in the foreground with uvicorn, or in a background thread for tests.

:class:`ReplayServer` plays a run on a free 127.0.0.1 port in its own thread::

    with ReplayServer(read_timelines("run.jsonl").timelines, injections=[...]) as replay:
        client = openai.OpenAI(base_url=replay.base_url, api_key="replay")
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import uvicorn

from steadystream._serving import ServedApp, uvicorn_config
from steadystream.lab.truth import RequestTruth
from steadystream.replay.app import ReplayState, create_app
from steadystream.timeline import Timeline

__all__ = ["ReplayServer", "serve"]


def serve(
    timelines: Sequence[Timeline],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    log_level: str = "info",
    **options: Any,
) -> None:
    """Serve the replay until interrupted (Ctrl-C); ``options`` go to :func:`create_app`."""
    app = create_app(timelines, **options)
    uvicorn.Server(uvicorn_config(app, host, port, log_level)).run()


class ReplayServer(ServedApp):
    """The replay on a free loopback port, in a background thread; a context manager."""

    name = "the replay"

    def __init__(
        self,
        timelines: Sequence[Timeline],
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        log_level: str = "warning",
        **options: Any,
    ) -> None:
        super().__init__(
            create_app(timelines, **options), host=host, port=port, log_level=log_level
        )

    @property
    def state(self) -> ReplayState:
        state: ReplayState = self.app.state.replay
        return state

    def truth(self, request_id: str) -> RequestTruth | None:
        """What a request was played (read it once the request is done)."""
        return self.call_in_loop(lambda: self.state.truths.get(request_id))

    def glass_reports(self) -> list[Timeline]:
        """The timelines pages posted to ``/steadystream/glass`` so far."""
        return self.call_in_loop(lambda: list(self.state.glass))
