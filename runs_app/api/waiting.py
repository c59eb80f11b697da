"""The run endpoints as async views, so that ``wait: true`` (and a stream) waits for its run
on the server's loop instead of on a thread (``runs_app.waits``).

The ViewSets stay DRF's (synchronous: authentication, CSRF, throttling, validation, the
error shape all as before); ``Waitable.as_view`` wraps each in a coroutine that runs the
DRF view on the request's thread, then, for a ``wait: true`` request, awaits the run with
that thread and the view's database connection given back. Requests that admit runs take
turns (``waits.database_turn``): a burst of them leaves the process's other requests room.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.http import HttpRequest, HttpResponseBase, StreamingHttpResponse
from rest_framework import status
from rest_framework.request import Request
from rest_framework.response import Response

from api.errors import error_body

from .. import waits
from ..models import Run
from ..selectors import run_data

# The actions that admit a run: they take turns.
ADMITTING = frozenset({"create", "stream", "compact", "continue_run", "regenerate"})


class WaitingResponse(Response):
    """A run admitted for a ``wait: true`` request; ``waitable`` answers it once it ends."""

    def __init__(self, run: Run, slot: waits.Slot | None) -> None:
        super().__init__(run_data(run), status=status.HTTP_200_OK)
        self.run_id = run.id
        self.session_id = run.session_id
        self.slot = slot


def answer(request: Request, wait: bool, admit: Callable[[], Run]) -> Response:
    """202 with the run ``admit`` admits; with ``wait``, 200 with the run once it has ended
    (or waits for its owner's decision; after 600 s as it is then). A wait takes one of the
    user's ``RUN_WAITS_PER_USER_MAX`` first: past it, 429 and no run is admitted."""
    if not wait:
        return Response(run_data(admit()), status=status.HTTP_202_ACCEPTED)
    slot = waits.take_slot(request.user.pk)
    try:
        run = admit()
    except BaseException:
        waits.give_back(slot)
        raise
    return WaitingResponse(run, slot)


def _give_back_unanswered(view_task: asyncio.Future[HttpResponseBase]) -> None:
    if view_task.cancelled() or view_task.exception() is not None:
        return
    response = view_task.result()
    if isinstance(response, WaitingResponse) and response.slot is not None:
        asyncio.get_running_loop().run_in_executor(None, waits.give_back, response.slot)


async def _finish(response: WaitingResponse) -> None:
    waits.release_request_thread()
    try:
        data = await waits.wait_for_run(response.run_id, response.session_id)
    finally:
        await waits.give_back_async(response.slot)
    if data is None:  # deleted while it ran (its session was)
        response.status_code = status.HTTP_404_NOT_FOUND
        response.data = error_body("NotFound", "No such run.")
    else:
        response.data = data


def waitable(view: Callable[..., HttpResponseBase]) -> Callable[..., Any]:
    actions = getattr(view, "actions", None) or {}

    def sync_part(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        response = view(request, *args, **kwargs)
        if isinstance(response, WaitingResponse | StreamingHttpResponse):
            waits.close_connections()  # it waits long: its connection goes back now
        return response

    # Thread-sensitive: the request's own thread, as for any sync view (a test's transaction).
    sync_view = sync_to_async(sync_part)

    async def run_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        view_task = asyncio.ensure_future(sync_view(request, *args, **kwargs))
        try:
            return await asyncio.shield(view_task)
        except asyncio.CancelledError:
            # The client went away while the view ran on its thread: a wait it admitted
            # still gives its slot back when the view returns.
            view_task.add_done_callback(_give_back_unanswered)
            raise

    async def waiting_view(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
        if actions.get(request.method.lower()) in ADMITTING:
            async with waits.database_turn():
                response = await run_view(request, *args, **kwargs)
        else:
            response = await run_view(request, *args, **kwargs)
        if isinstance(response, WaitingResponse):
            await _finish(response)
        return response

    # DRF's attributes (csrf_exempt, cls, actions: the schema and the URL checks read them).
    return functools.wraps(view)(waiting_view)


class Waitable:
    """A ViewSet whose views are ``waitable``."""

    @classmethod
    def as_view(cls, actions: dict[str, str] | None = None, **initkwargs: Any) -> Any:
        return waitable(super().as_view(actions, **initkwargs))  # type: ignore[misc]
