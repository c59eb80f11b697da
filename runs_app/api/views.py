"""Run endpoints: thin views (validate → one service → serialize)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator

from asgiref.sync import sync_to_async
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.decorators import api_view
from rest_framework.request import Request
from rest_framework.response import Response

from sessions_app import events
from sessions_app.errors import InvalidInput
from sessions_app.selectors import session_data, session_for_user

from ..executor import enqueue
from ..models import Run
from ..selectors import checkpoint_timeline, run_data, run_for_user
from ..services import branching
from ..services import runs as run_services
from ..transcript import model_messages


class RunIn(serializers.Serializer):
    mode = serializers.CharField(required=False, default="prompt")
    messages = serializers.JSONField(required=False, default=None)
    wait = serializers.BooleanField(required=False, default=False)
    multitask_strategy = serializers.CharField(required=False, default="reject")
    output_schema = serializers.JSONField(required=False, default=None)
    checkpoint = serializers.CharField(required=False, allow_blank=True, default="")


class ContinueIn(serializers.Serializer):
    continue_from = serializers.JSONField(required=False, default="end")
    input = serializers.JSONField(required=False, default=None)
    fork = serializers.JSONField(required=False, default=False)
    multitask_strategy = serializers.CharField(required=False, default="reject")
    wait = serializers.BooleanField(required=False, default=False)


class RegenerateIn(serializers.Serializer):
    replace_original = serializers.JSONField(required=False, default=True)
    multitask_strategy = serializers.CharField(required=False, default="reject")
    wait = serializers.BooleanField(required=False, default=False)


def _args(request: Request, serializer: type[serializers.Serializer] = RunIn) -> dict:
    if not isinstance(request.data, dict):
        raise InvalidInput("The body must be a JSON object.")
    data = serializer(data=request.data)
    data.is_valid(raise_exception=True)
    return dict(data.validated_data)


def _run_args(request: Request) -> dict:
    return _args(request, RunIn)


def _answer(run: Run, wait: bool) -> Response:
    if wait:
        return Response(run_data(run_services.wait_for_run(run)), status=status.HTTP_200_OK)
    return Response(run_data(run), status=status.HTTP_202_ACCEPTED)


@extend_schema(request=RunIn, responses={200: dict, 202: dict})
@api_view(["GET", "POST"])
def session_runs(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    if request.method == "GET":
        runs = Run.objects.filter(session=session).order_by("id")
        if request.query_params.get("all") not in ("1", "true"):
            runs = runs.filter(replaced_by__isnull=True)  # regenerate replace_original
        return Response([run_data(r) for r in runs])
    args = _run_args(request)
    wait = args.pop("wait")
    run = run_services.start_run(session=session, user=request.user, **args)
    return _answer(run, wait)


def _sse(event: str, data: str) -> bytes:
    return f"event: {event}\ndata: {data}\n\n".encode()


async def _stream_run(session_id: str, run_id: str) -> AsyncIterator[bytes]:
    """Subscribe first, then start the run, so no event of it is missed."""
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = await layer.new_channel()
    group = events.group_name(session_id)
    await layer.group_add(group, channel)
    try:
        await sync_to_async(enqueue, thread_sensitive=False)(run_id)
        while True:
            try:
                message = await asyncio.wait_for(layer.receive(channel), timeout=15)
            except TimeoutError:
                run = await sync_to_async(Run.objects.get)(id=run_id)
                if run.is_terminal:
                    break
                yield b": keep-alive\n\n"
                continue
            text = message.get("text", "{}")
            event = json.loads(text)
            yield _sse(event.get("type", "message"), text)
            if (
                event.get("type") == events.RUN_UPDATED
                and event.get("run", {}).get("id") == run_id
                and event["run"].get("status") in Run.TERMINAL
            ):
                break
        run = await sync_to_async(Run.objects.get)(id=run_id)
        yield _sse("run", json.dumps(run_data(run)))
    finally:
        await layer.group_discard(group, channel)


@extend_schema(request=RunIn, responses={200: str})
@api_view(["POST"])
def session_runs_stream(request: Request, session_id: str) -> StreamingHttpResponse:
    session = session_for_user(request.user, session_id)
    args = _run_args(request)
    args.pop("wait")
    if args.get("output_schema") is not None:
        raise InvalidInput("output_schema is not supported on the streaming endpoint.")
    run = run_services.start_run(session=session, user=request.user, defer_enqueue=True, **args)
    if run.status != Run.Status.PENDING or run.session_id != session.id:
        raise InvalidInput("The run could not be started.")
    response = StreamingHttpResponse(
        _stream_run(session.id, run.id), content_type="text/event-stream"
    )
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


@extend_schema(responses={200: dict})
@api_view(["GET"])
def run_detail(request: Request, run_id: str) -> Response:
    return Response(run_data(run_for_user(request.user, run_id)))


@extend_schema(responses={200: dict})
@api_view(["GET"])
def run_messages(request: Request, run_id: str) -> Response:
    """The run's transcript: what ``continue_from`` K counts."""
    run = run_for_user(request.user, run_id)
    return Response(model_messages(branching.run_path(run), run.session.system_prompt))


def _branch(request: Request, run_id: str, serializer: type, service) -> Response:  # noqa: ANN001
    run = run_for_user(request.user, run_id)
    args = _args(request, serializer)
    wait = args.pop("wait")
    return _answer(service(run=run, user=request.user, **args), wait)


@extend_schema(request=ContinueIn, responses={200: dict, 202: dict})
@api_view(["POST"])
def run_continue(request: Request, run_id: str) -> Response:
    return _branch(request, run_id, ContinueIn, branching.continue_run)


@extend_schema(request=RegenerateIn, responses={200: dict, 202: dict})
@api_view(["POST"])
def run_regenerate(request: Request, run_id: str) -> Response:
    return _branch(request, run_id, RegenerateIn, branching.regenerate_run)


@extend_schema(request=None, responses={202: dict})
@api_view(["POST"])
def run_cancel(request: Request, run_id: str) -> Response:
    run = run_services.cancel_run(run=run_for_user(request.user, run_id))
    return Response(run_data(run), status=status.HTTP_202_ACCEPTED)


@extend_schema(request=None, responses={200: dict})
@api_view(["POST"])
def session_abort(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    run = run_services.abort_session(session=session)
    session.refresh_from_db()
    return Response(
        {"session": session_data(session), "run": run_data(run) if run else None},
        status=status.HTTP_200_OK,
    )


@extend_schema(responses={200: dict})
@api_view(["GET"])
def session_checkpoints(request: Request, session_id: str) -> Response:
    return Response(checkpoint_timeline(session_for_user(request.user, session_id)))
