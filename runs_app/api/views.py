"""Run endpoints: thin views (validate → one service → serialize). Each ViewSet fetches and
authorizes its object once, in ``get_object()``; the routes are in ``config/urls.py``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.http import HttpResponse, StreamingHttpResponse
from django.utils.http import content_disposition_header
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api.base import ApiViewSet, FormatIsTheViewsOwn
from core.errors import InvalidInput
from realtime import events
from sessions_app.api.base import SessionScopedViewSet
from sessions_app.api.serializers.sessions import ForkIn, SessionOut
from sessions_app.api.serializers.sharing import SharedForkIn
from sessions_app.models import Share
from sessions_app.selectors import session_data
from sessions_app.services import downloads, sharing
from workspace import sandbox

from .. import waits
from ..execution.runtime import enqueue
from ..models import Run
from ..selectors import checkpoint_timeline, run_data, run_for_user, session_runs
from ..services import approvals, branching, export, importing
from ..services import fork as fork_services
from ..services import runs as run_services
from ..tools import TOOLS
from ..transcript import model_messages
from .parsers import ImportJSONParser
from .serializers import (
    AbortOut,
    ApproveIn,
    CheckpointOut,
    ContinueIn,
    ExportQueryIn,
    RegenerateIn,
    RunIn,
    RunOut,
    RunsQueryIn,
    RunStreamIn,
    SessionExportOut,
    ToolsOut,
    TranscriptEntryOut,
    TranscriptQueryIn,
)
from .waiting import Waitable, answer

# ``wait``: 200 with the finished run (``waiting.answer``); otherwise 202 with the run just
# admitted.
RUN_ANSWERS = {200: RunOut, 202: RunOut}


def _sse(event: str, data: str) -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


async def _stream_run(session_id: str, run_id: str) -> AsyncIterator[bytes]:
    """Subscribe first, then start the run, so no event of it is missed. No thread and no
    database connection is held between the run's events (``waits``)."""
    waits.release_request_thread()
    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = events.group_name(session_id)
    await layer.group_add(group, channel)
    # One receive at a time, never cancelled by the keep-alive's timeout: a cancelled receive
    # unsubscribes the channel (channels_redis), and events in the gap would be lost.
    receiving: asyncio.Future | None = None
    try:
        await sync_to_async(enqueue, thread_sensitive=False)(run_id)
        while True:
            if receiving is None:
                receiving = asyncio.ensure_future(layer.receive(channel))
            if not (await asyncio.wait({receiving}, timeout=15))[0]:
                stored = await waits.stored_status(run_id)
                if stored is None or stored in Run.TERMINAL:  # ended (or gone)
                    break
                yield b": keep-alive\n\n"
                continue
            message, receiving = receiving.result(), None
            text = message.get("text", "{}")
            event = json.loads(text)
            yield _sse(event.get("type", "message"), text)
            if (
                event.get("type") == events.RUN_UPDATED
                and event.get("run", {}).get("id") == run_id
                and event["run"].get("status") in Run.TERMINAL
            ):
                break
        yield _sse("run", json.dumps(await waits.stored_run(run_id)))
    finally:
        if receiving is not None:
            receiving.cancel()
        await layer.group_discard(group, channel)


class SessionRunViewSet(Waitable, SessionScopedViewSet):
    # The run moves on one session: its runs, a streamed run, abort, checkpoints, fork.

    @extend_schema(parameters=[RunsQueryIn], responses={200: RunOut(many=True)})
    def list(self, request: Request, session_id: str) -> Response:
        """The session's runs with lineage (``?all=1``: also those a regenerate replaced)."""
        session = self.get_object()
        replaced = self.query(RunsQueryIn)["all"]
        return Response([run_data(r) for r in session_runs(session, replaced=replaced)])

    @extend_schema(request=RunIn, responses=RUN_ANSWERS)
    def create(self, request: Request, session_id: str) -> Response:
        session = self.get_object()
        args = self.body(RunIn)
        wait = args.pop("wait")
        return answer(
            request,
            wait,
            lambda: run_services.start_run(session=session, user=request.user, **args),
        )

    @extend_schema(request=RunStreamIn, responses={(200, "text/event-stream"): OpenApiTypes.STR})
    def stream(self, request: Request, session_id: str) -> StreamingHttpResponse:
        """The run's events as server-sent events, then the run (``event: run``)."""
        session = self.get_object()
        args = self.body(RunStreamIn)
        args.pop("wait")
        run = run_services.start_run(session=session, user=request.user, defer_enqueue=True, **args)
        if run.status != Run.Status.PENDING or run.session_id != session.id:
            raise InvalidInput("The run could not be started.")
        response = StreamingHttpResponse(
            _stream_run(session.id, run.id), content_type="text/event-stream"
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return response

    @extend_schema(request=None, responses={202: RunOut})
    def compact(self, request: Request, session_id: str) -> Response:
        """Compact now: summarise the older turns for the model (the messages stay)."""
        run = run_services.compact_session(session=self.get_object(), user=request.user)
        return Response(run_data(run), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=None, responses={200: AbortOut})
    def abort(self, request: Request, session_id: str) -> Response:
        run = run_services.abort_session(session=self.get_object())
        session = self.get_object()  # as it is after the abort
        return Response({"session": session_data(session), "run": run_data(run) if run else None})

    @extend_schema(responses={200: CheckpointOut(many=True)})
    def checkpoints(self, request: Request, session_id: str) -> Response:
        return Response(checkpoint_timeline(self.get_object()))

    @extend_schema(request=ForkIn, responses={201: SessionOut})
    def fork(self, request: Request, session_id: str) -> Response:
        """A new session of the caller: the path up to ``message_id`` and the files there."""
        source = self.get_object()
        args = self.body(ForkIn)
        fork = fork_services.fork_session(source=source, user=request.user, **args)
        return Response(session_data(fork), status=status.HTTP_201_CREATED)


class RunViewSet(Waitable, ApiViewSet):
    # ``/api/runs/{run_id}/``: one run of the caller's.

    def get_object(self) -> Run:
        return run_for_user(self.request.user, self.kwargs["run_id"])

    @extend_schema(responses={200: RunOut})
    def retrieve(self, request: Request, run_id: str) -> Response:
        return Response(run_data(self.get_object()))

    @extend_schema(parameters=[TranscriptQueryIn], responses={200: TranscriptEntryOut(many=True)})
    def transcript(self, request: Request, run_id: str) -> Response:
        """The run's transcript as model-API messages: what the model is sent (a compaction's
        summary in place of the messages it replaced); ``?original=1``: every message, which
        is what ``continue_from`` K counts."""
        run = self.get_object()
        original = self.query(TranscriptQueryIn)["original"]
        path = branching.run_path(run)
        return Response(model_messages(path, run.session.system_prompt, original=original))

    @extend_schema(request=None, responses={202: RunOut})
    def cancel(self, request: Request, run_id: str) -> Response:
        run = run_services.cancel_run(run=self.get_object())
        return Response(run_data(run), status=status.HTTP_202_ACCEPTED)

    @extend_schema(request=ApproveIn, responses={200: RunOut})
    def approve(self, request: Request, run_id: str) -> Response:
        """The owner's decision on one tool call that waits (allow, deny with a reason, or
        always: allow and add a session rule for that exact argument)."""
        run = self.get_object()
        args = self.body(ApproveIn)
        run = approvals.decide(run=run, user=request.user, **args)
        return Response(run_data(run))

    @extend_schema(request=ContinueIn, responses=RUN_ANSWERS)
    def continue_run(self, request: Request, run_id: str) -> Response:
        run = self.get_object()
        args = self.body(ContinueIn)
        wait = args.pop("wait")
        return answer(
            request, wait, lambda: branching.continue_run(run=run, user=request.user, **args)
        )

    @extend_schema(request=RegenerateIn, responses=RUN_ANSWERS)
    def regenerate(self, request: Request, run_id: str) -> Response:
        run = self.get_object()
        args = self.body(RegenerateIn)
        wait = args.pop("wait")
        return answer(
            request, wait, lambda: branching.regenerate_run(run=run, user=request.user, **args)
        )


class SharedForkViewSet(ApiViewSet):
    # ``POST /api/shared/{token}/fork/``: a copy for the caller (a login is needed).

    def get_object(self) -> Share:
        return sharing.share_for_token(self.kwargs["token"], self.request.user, for_fork=True)

    @extend_schema(request=SharedForkIn, responses={201: SessionOut})
    def fork(self, request: Request, token: str) -> Response:
        share = self.get_object()
        title = self.body(SharedForkIn)["title"]
        fork = fork_services.fork_shared(share=share, user=request.user, title=title)
        return Response(session_data(fork), status=status.HTTP_201_CREATED)


class SessionExportViewSet(SessionScopedViewSet):
    # ``GET /api/sessions/{id}/export/``: the owner's download of the session.

    content_negotiation_class = FormatIsTheViewsOwn

    @extend_schema(
        parameters=[ExportQueryIn],
        responses={
            (200, "application/json"): SessionExportOut,
            (200, "text/markdown"): OpenApiTypes.STR,
        },
    )
    def export(self, request: Request, session_id: str) -> Response | HttpResponse:
        """json: the whole session (every branch, parts, runs, the files and their snapshots),
        what ``POST /api/sessions/import/`` takes; markdown: the active path, to read."""
        session = self.get_object()
        kind = self.query(ExportQueryIn)["format"]
        response: Response | HttpResponse
        if kind == "markdown":
            text = export.session_markdown(session=session)
            response = HttpResponse(text, content_type="text/markdown; charset=utf-8")
        else:
            response = Response(export.session_document(session=session))
        name = downloads.download_name(session, "md" if kind == "markdown" else "json")
        response["Content-Disposition"] = content_disposition_header(True, name)
        return response


class SessionImportViewSet(ApiViewSet):
    # ``POST /api/sessions/import/``: an export becomes a new session of the caller.

    parser_classes = [ImportJSONParser]

    @extend_schema(request=SessionExportOut, responses={201: SessionOut})
    def create(self, request: Request) -> Response:
        """A new session of the caller from a JSON export: the same tree, runs, head and
        files, under new ids (the body may be up to ``IMPORT_MAX_BODY_BYTES``)."""
        session = importing.import_session(user=request.user, document=request.data)
        return Response(session_data(session), status=status.HTTP_201_CREATED)


class ToolViewSet(ApiViewSet):
    # ``GET /api/tools/``: the deployment's tools and whether each can run here.

    @extend_schema(responses={200: ToolsOut})
    def list(self, request: Request) -> Response:
        """Every tool a permission can name; ``shell`` is ``available: false``, with the
        sentence why, where the deployment disables it or its sandbox cannot start."""
        shell_off = sandbox.unavailable_reason()
        return Response(
            {
                "results": [
                    {
                        "name": t.name,
                        "side_effects": t.side_effects,
                        "available": not (t.name == "shell" and shell_off),
                        "reason": shell_off if t.name == "shell" else "",
                    }
                    for t in TOOLS.values()
                ]
            }
        )
