"""The dashboard's web server: a Starlette app, served by uvicorn.

Routes: ``/`` the page and ``/static/*`` its script and style (package data, nothing
from the internet); ``/api/view`` the latest view as JSON; ``/events`` the views as
server-sent events (one per refresh, at least one a second); ``/metrics`` Prometheus'
text format. Only with actions enabled and the bearer token: ``POST /api/migrate`` a
migration request on the request board (what ``elastorm migrate`` writes), ``POST
/api/drain`` and ``POST /api/scale`` what ``elastorm drain`` and ``elastorm scale`` do
(the same functions of ``elastorm.runtime.scale``: the node set is written before the
answer, the wait for the controller and the provisioner's starts and stops go on in
the background).
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path

import anyio
from kazoo.exceptions import NoAuthError
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
from elastorm.errors import UserError
from elastorm.runtime.provision import NodeProvisioner
from elastorm.runtime.scale import carry_out, finish_drain, plan_scale, request_drain
from elastorm.zk.layout import ZnodeLayout
from elastorm.zk.requests import ZK_ERRORS, controller_alive, submit_request

log = logging.getLogger(__name__)

STATIC = Path(__file__).parent / "static"
HEARTBEAT_SECS = 1.0  # an SSE message at least this often, changed or not
SCALE_TIMEOUT_SECS = 300.0  # as ``elastorm scale`` / ``drain`` wait by default


def in_background(what: str, work: Callable[[], object]) -> threading.Thread:
    """Run ``work`` on a daemon thread; its failure is logged (the page shows the outcome
    through the controller's published state, not through this request)."""

    def run() -> None:
        try:
            work()
        except UserError as exc:
            log.warning("dashboard: %s: %s", what, exc)
        except Exception:
            log.exception("dashboard: %s failed", what)

    thread = threading.Thread(target=run, name=f"dashboard-{what}", daemon=True)
    thread.start()
    return thread


def zk_failure(exc: Exception) -> JSONResponse:
    """The answer to an action ZooKeeper failed: 403 if its ACLs refused the write (a
    secured topology, and this dashboard has not its secret), else 503."""
    if isinstance(exc, NoAuthError):
        return JSONResponse(
            {"error": "the topology is secured: start the dashboard with --secret-file"}, 403
        )
    return JSONResponse({"error": f"ZooKeeper: {exc!r}"}, 503)


def create_app(
    source: DashboardSource,
    *,
    token: str | None = None,
    key_group_limit: int = 64,
    nodes: NodeProvisioner | None = None,
    scale_timeout: float = SCALE_TIMEOUT_SECS,
) -> Starlette:
    """The app over ``source``; actions are enabled iff ``token`` is given; drain and
    scale also need ``nodes``, the provisioner that starts and stops nodes, and wait at
    most ``scale_timeout`` s for the controller before giving up (logged)."""

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

    def refused(request: Request) -> Response | None:
        """403 without actions, 401 without the right token (compared in constant time)."""
        if token is None:
            return JSONResponse({"error": "actions are disabled (--enable-actions)"}, 403)
        given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not hmac.compare_digest(given.encode(), token.encode()):
            return JSONResponse({"error": "bad or missing token"}, 401)
        return None

    async def migrate(request: Request) -> Response:
        if (denied := refused(request)) is not None:
            return denied
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
            return zk_failure(exc)
        if name is None:
            return JSONResponse({"error": f"the controller of {req.operator} is not running"}, 409)
        return JSONResponse({"request": name}, 202)

    async def scaling(request: Request, read: Callable[[dict], object], act) -> Response:
        """The common part of drain and scale: token, body, topology, provisioner, then
        ``act(layout, value)`` on a worker thread, whose ``UserError`` is a 409."""
        if (denied := refused(request)) is not None:
            return denied
        try:
            value = read(await request.json())
        except (ValueError, KeyError, TypeError) as exc:
            return JSONResponse({"error": f"bad request: {exc}"}, 400)
        topology = source.topology
        if topology is None:
            return JSONResponse({"error": "no topology yet"}, 409)
        if nodes is None:
            return JSONResponse({"error": "no node provisioner (--provisioner)"}, 501)
        try:
            body = await anyio.to_thread.run_sync(act, ZnodeLayout(topology), value)
        except UserError as exc:
            return JSONResponse({"error": str(exc)}, 409)
        except ZK_ERRORS as exc:
            return zk_failure(exc)
        source.refresh_now()  # the page shows the node draining (or starting) at once
        return JSONResponse(body, 202)

    def start_drain(layout: ZnodeLayout, value: tuple[str, bool]) -> dict:
        name, keep = value
        after = request_drain(source.client, layout, name)
        in_background(
            f"drain {name}",
            lambda: finish_drain(
                source.client, layout, name, after, nodes, scale_timeout, keep=keep
            ),
        )
        return {"draining": name, "wanted": list(after.wanted or ()), "keep": keep}

    def start_scale(layout: ZnodeLayout, count: int) -> dict:
        change = plan_scale(source.client, layout, count, nodes)
        in_background(
            f"scale to {count}",
            lambda: carry_out(source.client, layout, change, nodes, scale_timeout),
        )
        return {"nodes": count, "start": list(change.start), "drain": list(change.drain)}

    async def drain(request: Request) -> Response:
        return await scaling(
            request, lambda b: (str(b["node"]), bool(b.get("keep", False))), start_drain
        )

    async def scale(request: Request) -> Response:
        return await scaling(request, lambda b: int(b["nodes"]), start_scale)

    return Starlette(
        routes=[
            Route("/", index),
            Route("/api/view", api_view),
            Route("/events", events),
            Route("/metrics", metrics),
            Route("/api/migrate", migrate, methods=["POST"]),
            Route("/api/drain", drain, methods=["POST"]),
            Route("/api/scale", scale, methods=["POST"]),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ]
    )
