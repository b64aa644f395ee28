"""The glass probe's two routes, for any Starlette app (the gateway's and the replay's).

``GET /steadystream/glass.js`` serves the probe shipped in this package;
``POST /steadystream/glass`` takes a page's report (:mod:`steadystream.glass.intake`) and
hands its two timelines to ``accept``. The app decides who may post (``authorize``) and where
the timelines go; this module only checks the body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import cache
from importlib import resources

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from steadystream._api_errors import ApiError, read_body
from steadystream.glass.intake import GlassLimits, parse_report
from steadystream.timeline import Timeline

__all__ = ["INTAKE_PATH", "PROBE_PATH", "glass_routes", "probe_source"]

PROBE_PATH = "/steadystream/glass.js"
INTAKE_PATH = "/steadystream/glass"

Accept = Callable[[Sequence[Timeline]], None]
Authorize = Callable[[Request], None]  # raises ApiError to refuse


@cache
def probe_source() -> bytes:
    """The probe's JavaScript, as shipped in the package."""
    return resources.files("steadystream.glass").joinpath("probe.js").read_bytes()


def glass_routes(
    accept: Accept | None,
    limits: GlassLimits,
    *,
    keep_text: bool = False,
    authorize: Authorize | None = None,
) -> list[Route]:
    """The probe and, when ``accept`` is given, the intake (else posts get 403)."""

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
            if authorize is not None:
                authorize(request)
            raw = await read_body(request, limits.max_body_bytes)
            report = parse_report(raw, limits)
        except ApiError as exc:
            return exc.response()
        except ClientDisconnect:  # the page left before its report was in: nothing to keep
            return Response(status_code=400)
        accept(report.timelines(keep_text=keep_text))
        return Response(status_code=204)

    return [
        Route(PROBE_PATH, probe, methods=["GET"]),
        Route(INTAKE_PATH, intake, methods=["POST"]),
    ]
