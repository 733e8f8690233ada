"""The dashboard's web server: a Starlette app, served by uvicorn.

Routes: ``/`` the page and ``/static/*`` its script and style (package data, nothing
from the internet); ``/api/view`` the latest view as JSON; ``/events`` the views as
server-sent events (one per refresh, at least one a second); ``/metrics`` Prometheus'
text format; ``POST /api/migrate`` a migration request on the request board, only
with actions enabled and the bearer token.
"""

from __future__ import annotations

import hmac
import json
from pathlib import Path

import anyio
from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from elastorm.controller.requests import HOLDER, MigrationRequest, RequestError
from elastorm.core.messages import Protocol
from elastorm.dashboard.metrics import render
from elastorm.dashboard.source import DashboardSource
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import ZK_ERRORS, controller_alive, submit_request

STATIC = Path(__file__).parent / "static"
HEARTBEAT_SECS = 1.0  # an SSE message at least this often, changed or not


def create_app(
    source: DashboardSource, *, token: str | None = None, key_group_limit: int = 64
) -> Starlette:
    """The app over ``source``; actions are enabled iff ``token`` is given."""

    def current() -> dict | None:
        view = source.view()
        if view is not None:
            view = view | {"actions": token is not None}
        return view

    async def index(_: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-cache"})

    async def api_view(_: Request) -> Response:
        view = current()
        return JSONResponse(view if view is not None else {"waiting": True})

    async def events(request: Request) -> Response:
        async def stream():
            seq = -1
            yield "retry: 1000\n\n"
            while not await request.is_disconnected():
                view = await anyio.to_thread.run_sync(source.wait_newer, seq, HEARTBEAT_SECS)
                if view is None:
                    yield ": waiting for the first read\n\n"
                    continue
                seq = view["seq"]
                payload = json.dumps(view | {"actions": token is not None})
                yield f"id: {seq}\ndata: {payload}\n\n"

        return StreamingResponse(
            stream(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    async def metrics(_: Request) -> Response:
        body = render(source.view(), key_group_limit=key_group_limit)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def migrate(request: Request) -> Response:
        if token is None:
            return JSONResponse({"error": "actions are disabled (--enable-actions)"}, 403)
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return JSONResponse({"error": "bad or missing token"}, 401)
        try:
            body = await request.json()
            target = body.get("target", HOLDER)
            req = MigrationRequest(
                operator=str(body["operator"]),
                key_group=int(body["group"]),
                target=target if target == HOLDER else int(target),
                protocol=Protocol(body.get("protocol", "cpal")),
            )
        except (ValueError, KeyError, TypeError, RequestError) as exc:
            return JSONResponse({"error": f"bad request: {exc}"}, 400)
        topology = source.topology
        if topology is None:
            return JSONResponse({"error": "no topology yet"}, 409)

        def submit() -> str | None:
            layout = ZnodeLayout(topology)
            if not controller_alive(source.client, layout):
                return None
            return submit_request(source.client, layout, req)

        try:
            name = await anyio.to_thread.run_sync(submit)
        except ZK_ERRORS as exc:
            return JSONResponse({"error": f"ZooKeeper: {exc!r}"}, 503)
        if name is None:
            return JSONResponse({"error": f"the controller of {req.operator} is not running"}, 409)
        return JSONResponse({"request": name}, 202)

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/view", api_view),
            Route("/events", events),
            Route("/metrics", metrics),
            Route("/api/migrate", migrate, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
    )
