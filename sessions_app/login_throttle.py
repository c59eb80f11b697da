"""Failed logins are throttled per username *from each client address* and per address
across usernames (django-axes, configured in settings): ``LOGIN_FAILURE_LIMIT`` failures of
one username from one address within ``LOGIN_COOLOFF_MINUTES`` lock that username from that
address only; ``LOGIN_ADDRESS_FAILURE_LIMIT`` (higher) failures from one address, whatever the
usernames, lock the address. A username is never locked everywhere: no one can lock a person
out from another address (issue 14, finding 15).

Both doors — the login form (and the admin's) and ``POST /api/auth/token/`` — go through
``authenticate()``, where axes' backend refuses a locked client before any password is checked.
This module holds what axes leaves to the project: the two limits (axes has one limit for all
its lockout parameters), the 429 answer, the rule for what a success forgets, and the length
of the username it stores."""

from __future__ import annotations

import math
from typing import Any

from axes.backends import AxesStandaloneBackend
from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_client_ip_address, get_cool_off, get_failure_limit
from axes.models import AccessAttempt
from axes.utils import reset
from django.conf import settings
from django.db.models import Max, QuerySet, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from api.errors import error_body

USERNAME_MAX = AccessAttempt._meta.get_field("username").max_length


class LoginThrottleBackend(AxesStandaloneBackend):
    """Axes' backend, except for ``authenticate()`` calls without a request: those are no login
    door (``Client.login`` in tests, a shell) and there is no client to count them against —
    axes would raise instead. Every door of ours passes the request."""

    def authenticate(self, request: HttpRequest | None, *args: Any, **kwargs: Any) -> None:
        if request is None:
            return None
        return super().authenticate(request, *args, **kwargs)


class LoginAttemptsHandler(AxesDatabaseHandler):
    """Axes' database handler with a narrower reset on success (``AXES_RESET_ON_SUCCESS``) and
    a limit per lockout parameter.

    Axes compares the largest count of its lockout parameters (here the pair username +
    address, and the address alone) with one ``AXES_FAILURE_LIMIT``. The address must have a
    higher limit than the pair — the same ten failures that lock one name from one address
    must not lock everyone behind it — so the count given to axes is the pair's, or the limit
    itself once the address has reached its own (``LOGIN_ADDRESS_FAILURE_LIMIT``)."""

    def reset_user_attempts(self, request: HttpRequest, credentials: dict | None = None) -> int:
        return forget_failures(request, client_username(request, credentials))

    def get_failures(self, request: HttpRequest, credentials: dict | None = None) -> int:
        by_pair, by_address = failure_counts(request, credentials)
        if by_address >= settings.LOGIN_ADDRESS_FAILURE_LIMIT:
            return max(by_pair, get_failure_limit(request, credentials))
        return by_pair


def _recent(request: HttpRequest) -> QuerySet:
    """The failures from the request's address still inside the cool-off window."""
    return AccessAttempt.objects.filter(
        ip_address=_address(request), attempt_time__gte=timezone.now() - get_cool_off(request)
    )


def _address(request: HttpRequest) -> str | None:
    return getattr(request, "axes_ip_address", None) or get_client_ip_address(request)


def failure_counts(request: HttpRequest, credentials: dict | None = None) -> tuple[int, int]:
    """Recent failures of this username from this address, and from this address in all."""
    recent = _recent(request)
    username = client_username(request, credentials)
    total = Sum("failures_since_start")
    by_pair = recent.filter(username=username).aggregate(n=total)["n"] or 0
    by_address = recent.aggregate(n=total)["n"] or 0
    return by_pair, by_address


def forget_failures(request: HttpRequest, username: str | None) -> int:
    """A successful login forgets the failures of that username *from that address* only.

    Axes' own reset deletes every failure of the username and every failure of the address;
    with a lockout by either, one valid account would then let an attacker wipe the address's
    count — and its victims' — between guesses."""
    return reset(ip=get_client_ip_address(request), username=username)


def client_username(request: HttpRequest, credentials: dict | None = None) -> str | None:
    """``AXES_USERNAME_CALLABLE``: the username failures count against, cut to the column's
    length — the API takes usernames of any length, and a long one is a failure to count, not
    an insert that fails with a 500."""
    source = credentials or getattr(request, "data", None) or request.POST
    username = source.get("username") if hasattr(source, "get") else None
    return None if username is None else str(username)[:USERNAME_MAX]


def retry_after_seconds(request: HttpRequest, credentials: dict | None = None) -> int:
    """Seconds until every counted failure behind the lock has aged out of the cool-off
    window — this username's from this address, or the address's when the address is over
    its own limit: when the lock is certainly over. Attempts refused during a lockout are not
    counted (``AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT`` is off), so the moment does not
    move while a locked client keeps trying."""
    cool_off = get_cool_off(request)
    recent = _recent(request)
    _by_pair, by_address = failure_counts(request, credentials)
    if by_address < settings.LOGIN_ADDRESS_FAILURE_LIMIT:
        recent = recent.filter(username=client_username(request, credentials))
    newest = recent.aggregate(newest=Max("attempt_time"))["newest"]
    if newest is None:
        return math.ceil(cool_off.total_seconds())
    return max(1, math.ceil((newest + cool_off - timezone.now()).total_seconds()))


def lockout_message(seconds: int) -> str:
    minutes = max(1, math.ceil(seconds / 60))
    unit = "minute" if minutes == 1 else "minutes"
    return (
        "Too many failed logins for this username from this address, or from this address: "
        f"try again in {minutes} {unit}."
    )


def lockout_response(
    request: HttpRequest, original_response: Any = None, credentials: Any = None
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE`` (the form login) and the token endpoint's answer: 429 with
    when to retry — the contract's JSON error on the API, a page of ours elsewhere.

    The credentials are read from the request: axes' async middleware passes them in the
    place of ``original_response``."""
    credentials = getattr(request, "axes_credentials", None)
    seconds = retry_after_seconds(request, credentials)
    message = lockout_message(seconds)
    if request.path.startswith("/api/"):
        response: HttpResponse = JsonResponse(error_body("Throttled", message), status=429)
    else:
        response = render(request, "app/locked_out.html", {"message": message}, status=429)
    response["Retry-After"] = str(seconds)
    return response
