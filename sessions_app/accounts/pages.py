"""The sign-up and invitation pages. A sign-up POST counts against the login throttle
(django-axes, ``sessions_app.login_throttle``) under one key per client address, so that a
flood of sign-ups from one address is refused like a flood of wrong passwords."""

from __future__ import annotations

from axes.handlers.proxy import AxesProxyHandler
from django.contrib.auth import login
from django.contrib.auth.forms import UserCreationForm
from django.contrib.auth.signals import user_login_failed
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render

from core.errors import AppError

from ..login_throttle import lockout_message, retry_after_seconds
from . import services

# The username axes counts sign-up attempts under: no real username can be this (Django's
# usernames have no parentheses or spaces). Its pair with the address is limited like a
# username's (LOGIN_FAILURE_LIMIT), and it adds to the address's count of failed logins.
SIGNUP_ATTEMPTS = {"username": "(sign-up)"}
# Two backends (axes' throttle, then the model): login() must be told which one.
MODEL_BACKEND = "django.contrib.auth.backends.ModelBackend"


def signup_throttled(request: HttpRequest) -> HttpResponse | None:
    """None when this sign-up POST may go on (it is then counted); else the 429 page."""
    if AxesProxyHandler.is_allowed(request, SIGNUP_ATTEMPTS):
        user_login_failed.send(__name__, credentials=SIGNUP_ATTEMPTS, request=request)
        # This attempt was allowed; the next one is refused above. Without this, axes'
        # middleware would turn this answer into its login lockout page.
        request.axes_locked_out = False
        return None
    seconds = retry_after_seconds(request, SIGNUP_ATTEMPTS)
    message = lockout_message(seconds).replace(
        "Too many failed logins for this username from this address, or from this address",
        "Too many sign-ups or failed logins from this address",
    )
    response = render(request, "app/signup.html", {"throttled": message}, status=429)
    response["Retry-After"] = str(seconds)
    return response


def signup(request: HttpRequest) -> HttpResponse:
    """Self sign-up where ``SIGNUP`` is open or approval; otherwise a 404 (users are added by
    an admin: the admin, an invitation link, or ``manage.py adduser``)."""
    mode = services.signup_mode()
    if mode == "off":
        raise Http404("Sign-up is off.")
    if request.method == "POST" and (refused := signup_throttled(request)):
        return refused
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        user = services.sign_up(form)
        if not user.is_active:
            return render(request, "app/signup.html", {"waiting": True, "username": user})
        login(request, user, backend=MODEL_BACKEND)
        return redirect("home")
    context = {"form": form, "approval": mode == "approval"}
    return render(request, "app/signup.html", context, status=400 if form.errors else 200)


def invitation(request: HttpRequest, token: str) -> HttpResponse:
    """An invitation link: pick a username and password, the account is active at once
    (whatever ``SIGNUP`` says). A link unknown, used or expired is a page saying so."""
    try:
        found = services.invitation_for(token)
    except AppError as exc:
        return _unusable(request, exc)
    reason = services.unusable_reason(found)
    if reason:
        return _unusable(request, services.InvitationUnusable(reason))
    form = UserCreationForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        try:
            user = services.accept_invitation(token, form)
        except AppError as exc:
            return _unusable(request, exc)
        login(request, user, backend=MODEL_BACKEND)
        return redirect("home")
    context = {"form": form, "invitation": True}
    return render(request, "app/signup.html", context, status=400 if form.errors else 200)


def _unusable(request: HttpRequest, exc: AppError) -> HttpResponse:
    context = {"unusable": exc.message}
    return render(request, "app/signup.html", context, status=exc.status_code)
