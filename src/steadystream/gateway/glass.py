"""The glass probe on the gateway: ``/steadystream/glass.js``, and its reports recorded.

A page's report (:mod:`steadystream.glass.intake`) becomes a ``client`` and a ``glass``
timeline that are appended to the gateway's recording next to its own two edges of the same
request id: real-user monitoring of the last stretch, from the socket to the screen. Posts
are taken only with ``glass.accept`` and recording on, from a caller the gateway's keys admit
(the page already holds one to call the gateway), within ``glass`` limits.
"""

from __future__ import annotations

from collections.abc import Sequence

from starlette.requests import Request
from starlette.routing import Route

from steadystream._api_errors import ApiError
from steadystream.gateway.state import GatewayState
from steadystream.glass.intake import GlassLimits
from steadystream.glass.routes import glass_routes
from steadystream.timeline import Timeline

__all__ = ["gateway_glass_routes"]


def gateway_glass_routes(state: GatewayState) -> list[Route]:
    """The probe, and the intake when ``glass.accept`` is on."""
    config = state.config.glass
    limits = GlassLimits(max_body_bytes=config.max_body_bytes, max_events=config.max_events)

    def authorize(request: Request) -> None:
        state.auth.tenant_for(request.headers.get("authorization"))  # AuthError is an ApiError
        if state.recorder is None:
            raise ApiError(
                403,
                "glass reports go to the recording, which is off (recording.enabled)",
                type="permission_error",
                code="recording_off",
            )

    def accept(timelines: Sequence[Timeline]) -> None:
        if state.recorder is None:
            return
        try:
            state.recorder.write(timelines)
        except OSError as exc:  # a full disk must not fail the page
            state.log.error("recording glass timelines failed: %s", exc)

    return glass_routes(
        accept if config.accept else None,
        limits,
        keep_text=state.config.recording.keep_text,
        authorize=authorize,
    )
