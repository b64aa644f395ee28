"""The glass probe's two routes, for any Starlette app (the gateway's and the replay's).

``GET /steadystream/glass.js`` serves the probe shipped in this package;
``POST /steadystream/glass`` takes a page's report (:mod:`steadystream.glass.intake`) and
hands its two timelines to ``accept``. The app decides who may post and where the timelines
go: ``admit`` runs before the body is read (keys, tokens, budgets) and gives what checks the
report once it is parsed and turns it into timelines; this module reads and checks the body,
within ``body_timeout_s`` when one is given (a body that trickles in holds a connection).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from steadystream._api_errors import ApiError, read_body
from steadystream.glass.intake import GlassLimits, GlassReport, parse_report
from steadystream.timeline import Timeline

__all__ = ["INTAKE_PATH", "PROBE_PATH", "glass_routes", "probe_source"]

PROBE_PATH = "/steadystream/glass.js"
INTAKE_PATH = "/steadystream/glass"

Accept = Callable[[Sequence[Timeline]], None]
Take = Callable[[GlassReport, int], Sequence[Timeline]]
"""Checks a parsed report (and its size in bytes) against what was admitted, and gives the
timelines to record; raises :class:`ApiError` to refuse."""
Admit = Callable[[Request], Take]
"""Decides, before the body is read, whether a post may be made; raises to refuse."""


@cache
def probe_source() -> bytes:
    """The probe's JavaScript, as shipped in the package."""
    return resources.files("steadystream.glass").joinpath("probe.js").read_bytes()


def glass_routes(
    accept: Accept | None,
    limits: GlassLimits,
    *,
    keep_text: bool = False,
    admit: Admit | None = None,
    body_timeout_s: float | None = None,
) -> list[Route]:
    """The probe and, when ``accept`` is given, the intake (else posts get 403). Without
    ``admit`` every post is taken (the replay's, on loopback)."""

    async def probe(request: Request) -> Response:
        headers = {"cache-control": "public, max-age=300"}
        return Response(probe_source(), media_type="text/javascript", headers=headers)

    async def intake(request: Request) -> Response:
        try:
            if accept is None:
                raise ApiError(
                    403,
                    "this server does not take glass reports (glass.accept is off)",
                    type="permission_error",
                    code="glass_off",
                )
            take = admit(request) if admit is not None else None
            raw = await _read(request, limits.max_body_bytes, body_timeout_s)
            report = parse_report(raw, limits)
            if take is None:
                timelines: Sequence[Timeline] = report.timelines(keep_text=keep_text)
            else:
                timelines = take(report, len(raw))
        except ApiError as exc:
            return exc.response()
        except ClientDisconnect:  # the page left before its report was in: nothing to keep
            return Response(status_code=400)
        accept(timelines)
        return Response(status_code=204)

    return [
        Route(PROBE_PATH, probe, methods=["GET"]),
        Route(INTAKE_PATH, intake, methods=["POST"]),
    ]


async def _read(request: Request, limit: int, timeout_s: float | None) -> bytes:
    try:
        async with asyncio.timeout(timeout_s):
            return await read_body(request, limit)
    except TimeoutError as exc:
        raise ApiError(
            408, "the glass report did not arrive in time (server.body_timeout)", code="timeout"
        ) from exc
