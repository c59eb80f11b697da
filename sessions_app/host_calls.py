"""History moves on the session's home host (issue 45, steps 1 and 3): a web process that
holds no worktree (``WORKSPACE_ROOT=""``: ``core.mode.holds_worktrees()`` False) sends each
move that touches the files — revert, unrevert, cleanup, rollback, a head switch, an apply
(and the admin's revert preview, which compares with the live worktree) — to the
Celery queue of the session's home host and waits for the answer; everywhere else (embedded
mode, one host, a shared volume) the service is called right here, as before.

**Which calls.** Only the names of ``CALLS`` (a fixed allow-list of service functions), with
the session's id, the acting user's id and the move's own JSON arguments: nothing from the
wire names code. runs_app adds its own at start-up (``register``, from its ``AppConfig.ready``:
a cancel that must close a dead run's open step, an adopt), since sessions_app imports no
runs_app module.

**Where.** The session's home (``Session.host``) while it is live; a dead or blank home is
first moved to the live host with the fewest sessions (``hosts.place``, by a compare-and-set
on the row, as ``rehome`` moves one). The host that receives the call materialises the
worktree from the central store if it lacks it (``rehome.on_claim``), under the session's
row lock and only while no run holds the session (a run beginning there at the same moment
waits for the row, then finds the files; a run that holds it materialised them itself, as
``runs_app/execution/host.py`` does after ``begin``), then calls the service.

**The answer** comes back through Redis, not Celery's result backend (off on purpose:
``core/mode.py``): the host pushes one JSON reply (with the service's own JSON object, for a
service that answers one: ``call_json``) on a list keyed by the call's id (with an
expiry) and the web waits on it with ``BLPOP`` for at most ``HOST_CALL_TIMEOUT`` seconds. An
``AppError`` (409 busy, 400 bad input…) or a worktree error raised on the host is raised
again here, so the API answers the same JSON as a direct call. No answer in time is a 503
``ServiceUnavailable``; the call is then abandoned by a claim the host must win before it
starts (``SET NX`` on the call's state key), so a host that picks the message up later does
nothing. If the host had already started, the web waits once more for its answer.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

import redis
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from core import mode
from core.errors import AppError, NotFoundError
from workspace import snapshots

from . import hosts, rehome
from .models import Session
from .services import apply, cleanup, lock, revert, revert_plan, rollback, unrevert
from .services import sessions as session_services

log = logging.getLogger(__name__)
TASK_NAME = "sessions_app.host_call"
STATE_TTL = 3600  # seconds a call's claim is kept (a message older than that is refused too)
REPLY_TTL = 120


def _materialize(*, session: Session, user=None) -> Session:  # noqa: ANN001
    """The session's worktree on its home (done by the claim before every call): an upload
    made in a web process that holds no worktree has its files on its host at once."""
    return session


def _plan_revert(*, session: Session, user=None, **kwargs: Any) -> dict:  # noqa: ANN001, ARG001
    """The admin's revert preview, on the host whose worktree it compares with."""
    return revert_plan.plan_revert(session=session, **kwargs)


# The allow-list: the name sent on the wire → the service the host calls, and the only
# arguments it may be given besides the session and the user.
CALLS: dict[str, tuple[Callable[..., Session], frozenset[str]]] = {
    "revert": (revert.revert_session, frozenset({"message_id", "part_id", "mode"})),
    "unrevert": (unrevert.unrevert_session, frozenset()),
    "cleanup": (cleanup.cleanup_session, frozenset()),
    "rollback": (rollback.rollback_session, frozenset({"num_turns"})),
    "head": (session_services.switch_head, frozenset({"message_id"})),
    "materialize": (_materialize, frozenset()),
    "apply": (apply.apply_change, frozenset({"part_id", "message_id", "on_conflict", "scope"})),
    "revert_plan": (_plan_revert, frozenset({"message_id", "part_id", "mode"})),
}


def register(name: str, service: Callable[..., Session], allowed: frozenset[str]) -> None:
    """Add ``name`` to the allow-list (another app's service, at start-up: its ``ready``)."""
    CALLS[name] = (service, allowed)


class HostUnavailable(AppError):
    """The session's home host did not answer in time (or none is live): nothing was done,
    unless the message says the host had begun."""

    status_code = 503
    type = "ServiceUnavailable"
    retry_after = 1


def call(name: str, *, session: Session, user=None, **kwargs: Any) -> Session:  # noqa: ANN001
    """``CALLS[name](session=…, user=…, **kwargs)`` here, or on the session's home host when
    this process holds no worktree (see the module): the session as the move left it."""
    result = _call(name, session, user, kwargs)
    return result if isinstance(result, Session) else Session.objects.get(id=session.id)


def call_json(name: str, *, session: Session, user=None, **kwargs: Any) -> dict:  # noqa: ANN001
    """As ``call``, for a service that answers a JSON object (an apply's result, say): that
    object, from the home host's reply when the call went there."""
    result = _call(name, session, user, kwargs)
    if not isinstance(result, dict):
        raise TypeError(f"{name}: the service answered no JSON object")
    return result


def _call(name: str, session: Session, user, kwargs: dict[str, Any]) -> Any:  # noqa: ANN001
    """The service's answer here; from the home host, its JSON object (None for another)."""
    service, allowed = CALLS[name]
    if set(kwargs) - allowed:
        raise TypeError(f"{name}: unexpected arguments {sorted(set(kwargs) - allowed)}")
    if mode.embedded() or mode.holds_worktrees():
        return service(session=session, user=user, **kwargs)
    call_id = uuid.uuid4().hex
    payload = {
        "id": call_id,
        "name": name,
        "session": session.id,
        "user": user.pk if user is not None and user.is_authenticated else None,
        "kwargs": kwargs,
        "deadline": time.time() + STATE_TTL,
    }
    mode.send_task(TASK_NAME, [payload], queue=mode.host_queue(home_of(session)))
    return _wait(call_id).get("result")


def home_of(session: Session) -> str:
    """The session's live home, after moving a dead or blank one to the live host with the
    fewest sessions (``HostUnavailable`` when no host is live)."""
    for _ in range(3):  # a claim or a drain that moves it meanwhile: its new home
        current = Session.objects.filter(id=session.id).values_list("host", flat=True).first()
        if current is None:
            raise NotFoundError("Session not found.")
        if current and hosts.is_live(current):
            return current
        target = hosts.place()
        if not target:
            break
        if Session.objects.filter(id=session.id, host=current).update(host=target):
            log.info("session %s re-homed from %r to %r for a move", session.id, current, target)
            return target
    raise HostUnavailable("No worker host is live to hold this session's files; try again.")


def _client() -> redis.Redis:
    wait = settings.HOST_CALL_TIMEOUT
    return redis.Redis.from_url(mode.redis_url(), socket_timeout=wait + 10)


def _keys(call_id: str) -> tuple[str, str]:
    return f"agentplat:host-call:{call_id}:reply", f"agentplat:host-call:{call_id}:state"


def _wait(call_id: str) -> dict[str, Any]:
    """The reply of ``call_id``; raise what the host raised, or ``HostUnavailable``."""
    reply_key, state_key = _keys(call_id)
    client = _client()
    try:
        got = client.blpop([reply_key], timeout=settings.HOST_CALL_TIMEOUT)
        if got is None and not client.set(state_key, "abandoned", nx=True, ex=STATE_TTL):
            # The host began before the deadline: its answer is worth one more wait.
            got = client.blpop([reply_key], timeout=settings.HOST_CALL_TIMEOUT)
            if got is None:
                raise HostUnavailable(
                    "The session's host did not answer in time; the change may still be "
                    "under way there: reload the session before trying again."
                )
        if got is None:
            raise HostUnavailable(
                "The session's host did not answer in time; nothing was changed: try again."
            )
    finally:
        client.close()
    reply = json.loads(got[1])
    _raise_reply(reply)
    return reply


def _raise_reply(reply: dict[str, Any]) -> None:
    error = reply.get("error")
    if not error:
        return
    if error["kind"] == "app":
        exc = AppError(error["message"])
        exc.status_code, exc.type = error["status"], error["type"]
        for extra in ("retry_after", "resets_at"):
            if error.get(extra) is not None:
                setattr(exc, extra, error[extra])
        raise exc
    if error["kind"] == "worktree":
        raise snapshots.SnapshotError(error["message"])
    # A failure of the host's own (logged there with its traceback): a JSON 503 here, never
    # an HTML 500; what the host did before it failed is what its transaction kept.
    raise HostUnavailable(
        f"The session's host failed this call ({error['message']}); its log says why."
    )


# -- on the host (sessions_app/tasks.py) -------------------------------------------------------


def answer(payload: dict[str, Any]) -> None:
    """(A worker of the home host.) Run the call ``payload`` unless the web abandoned it, and
    push the reply."""
    reply_key, state_key = _keys(payload["id"])
    client = _client()
    try:
        if time.time() > payload["deadline"]:
            return
        if not client.set(state_key, "started", nx=True, ex=STATE_TTL):
            return  # abandoned by the web (or delivered twice)
        reply = _run(payload)
        client.rpush(reply_key, json.dumps(reply))
        client.expire(reply_key, REPLY_TTL)
    finally:
        client.close()


def _run(payload: dict[str, Any]) -> dict[str, Any]:
    service, allowed = CALLS.get(payload["name"], (None, frozenset()))
    try:
        if service is None or set(payload["kwargs"]) - allowed:
            raise NotFoundError("No such call.")
        session = claim(payload["session"])
        user = None
        if payload["user"] is not None:
            user = get_user_model().objects.filter(pk=payload["user"]).first()
        result = service(session=session, user=user, **payload["kwargs"])
    except AppError as exc:
        return {"error": _app_error(exc)}
    except snapshots.SnapshotError as exc:
        return {"error": {"kind": "worktree", "message": str(exc)}}
    except Exception as exc:
        log.exception("host call %s on session %s failed", payload["name"], payload["session"])
        return {"error": {"kind": "server", "message": exc.__class__.__name__}}
    return {"ok": True, "result": result} if isinstance(result, dict) else {"ok": True}


def claim(session_id: str) -> Session:
    """(On the host.) The session, its worktree materialised here from the central store if
    this host lacks it (``rehome.on_claim``), under the session's row lock so that no run
    begins meanwhile; not while a run holds the session (that run's claim did it, and the
    call then meets the busy session as a direct call would)."""
    with transaction.atomic():
        session = Session.objects.filter(id=session_id).first()
        if session is None:
            raise NotFoundError("Session not found.")
        locked = lock.lock_session(session_id)
        if not lock.is_busy(locked):
            rehome.on_claim(locked)
    return locked


def _app_error(exc: AppError) -> dict[str, Any]:
    return {
        "kind": "app",
        "status": exc.status_code,
        "type": exc.type,
        "message": exc.message,
        "retry_after": getattr(exc, "retry_after", None),
        "resets_at": getattr(exc, "resets_at", None),
    }
