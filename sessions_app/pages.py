"""Server-rendered pages of the browser UI; the chat view's behaviour is in static/chat/ (its
entry: static/app.js)."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django.contrib.auth import update_session_auth_hash
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.forms import PasswordChangeForm
from django.contrib.auth.views import redirect_to_login
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import Resolver404, path, resolve
from django.views.decorators.http import require_POST

from core.errors import AppError, NotAuthenticated, NotFoundError

from .accounts import pages as account_pages
from .accounts import services as account_services
from .api.serializers.repositories import CredentialIn
from .repositories import credentials as credential_services
from .selectors import session_for_user, sessions_for_user
from .services import sharing
from .services.accounts import change_password
from .services.sessions import create_session, delete_session, rename_session

LIST_PAGE = 100

Page = Callable[..., HttpResponse]


def found_or_404(view: Page) -> Page:
    """Selectors and services raise NotFoundError for what the user may not see or what is
    gone (the API answers it in its JSON shape); a page answers Django's 404 page."""

    @wraps(view)
    def page(request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        try:
            return view(request, *args, **kwargs)
        except NotFoundError as exc:
            raise Http404(exc.message) from exc

    return page


def _list_context(request: HttpRequest, **extra: object) -> dict:
    query = request.GET.get("q", "").strip()[:200]
    before = request.GET.get("before", "")[:40]
    sessions = sessions_for_user(request.user, query).select_related("forked_from_session")
    if before:
        sessions = sessions.filter(id__lt=before)
    sessions = list(sessions[: LIST_PAGE + 1])
    older = sessions[LIST_PAGE - 1].id if len(sessions) > LIST_PAGE else None
    sessions = sessions[:LIST_PAGE]
    mine = {s.id for s in sessions}
    for s in sessions:
        # Lineage, as far as it is mine to see: a fork of another user's shared session
        # shows that it is a fork, not whose.
        s.parent_visible = s.forked_from_session_id in mine or (
            s.forked_from_session is not None and s.forked_from_session.owner_id == request.user.pk
        )
    return {
        "sessions": sessions,
        "q": query,
        "older": older,
        "before": before,
        "open_new_from": request.GET.get("new") == "1",
        **extra,
    }


def _list_error(request: HttpRequest, exc: AppError) -> HttpResponse:
    context = _list_context(request, error=exc.message)
    return render(request, "app/sessions.html", context, status=exc.status_code)


@login_required
def session_list(request: HttpRequest) -> HttpResponse:
    return render(request, "app/sessions.html", _list_context(request))


@login_required
@require_POST
@found_or_404
def session_rename(request: HttpRequest, session_id: str) -> HttpResponse:
    session = session_for_user(request.user, session_id)
    try:
        rename_session(session=session, title=request.POST.get("title", ""))
    except AppError as exc:
        return _list_error(request, exc)
    return redirect("home")


@login_required
@require_POST
@found_or_404
def session_delete(request: HttpRequest, session_id: str) -> HttpResponse:
    session = session_for_user(request.user, session_id)
    try:
        delete_session(session=session)
    except AppError as exc:
        return render(
            request, "app/sessions.html", _list_context(request, error=exc.message), status=409
        )
    return redirect("home")


@login_required
@require_POST
def session_new(request: HttpRequest) -> HttpResponse:
    try:
        session = create_session(owner=request.user, title=request.POST.get("title", "").strip())
    except AppError as exc:
        return _list_error(request, exc)
    return redirect("chat", session_id=session.id)


@login_required
@found_or_404
def chat(request: HttpRequest, session_id: str) -> HttpResponse:
    session = session_for_user(request.user, session_id)
    return render(request, "app/chat.html", {"session": session})


@found_or_404
def shared(request: HttpRequest, token: str) -> HttpResponse:
    """A share link: the pinned conversation, read-only, with "fork into my account"."""
    try:
        share = sharing.share_for_token(token, request.user)
    except NotAuthenticated:
        return redirect_to_login(request.get_full_path())
    try:
        data = sharing.shared_data(share, before=request.GET.get("before") or None)
    except AppError as exc:
        return HttpResponse(exc.message, status=exc.status_code, content_type="text/plain")
    return render(request, "app/shared.html", {"share": shown(bounded(data))})


# The shared page lists this many files and changes (a big repository's whole list was a
# page of megabytes); the rest is counted, and the API and a fork have them all.
SHARED_PAGE_ROWS = 200
PATCH_NAMES = 12  # as the chat's patch line (static/chat/parts.js)


def bounded(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` (sharing.shared_data) with its files, changes and each patch part's names cut
    for a page, and how many each left out (``files_more``, ``diff_more``, ``more``: "2,988",
    or "" when none was)."""

    def left(count: int, shown: int) -> str:
        return f"{count - shown:,}" if count > shown else ""

    for key in ("files", "diff"):
        rows = data[key]
        data[key], data[f"{key}_more"] = rows[:SHARED_PAGE_ROWS], left(len(rows), SHARED_PAGE_ROWS)
    for message in data["messages"]:
        for part in message["parts"]:
            if part["type"] == "patch":
                names = part.get("files") or []
                count = part.get("file_count", len(names))
                part["files"], part["more"] = names[:PATCH_NAMES], left(count, PATCH_NAMES)
    return data


def shown(value: Any) -> Any:
    """``value`` with every string made fit for a page: a worktree's file name that is not
    UTF-8 is held with lone surrogates (``surrogateescape``), which no page can encode (the
    shared page of such a worktree was a 500, issue 42); each such byte shows as U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode()
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        return value
    if isinstance(value, dict):
        return {k: shown(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [shown(v) for v in value]
    return value


class LoginPage(auth_views.LoginView):
    """Django's login, saying why it is shown when ``next`` is a share link (the share page's
    "Log in to fork", or its redirect where reading needs a login); the login then returns
    there. ``next`` is used only as Django validated it (same site) and only through the
    share it names: none of its text is shown."""

    template_name = "app/login.html"

    def form_invalid(self, form: Any) -> HttpResponse:
        """Right credentials of an account that waits for an admin's approval: the page says
        so instead of "wrong username or password"."""
        waiting = account_services.is_waiting(
            form.data.get("username", ""), form.data.get("password", "")
        )
        return self.render_to_response(self.get_context_data(form=form, waiting=waiting))

    def get_context_data(self, **kwargs: object) -> dict:
        return {
            **super().get_context_data(**kwargs),
            "allow_signup": account_services.signup_mode() != "off",
            **_share_reason(self.request, self.get_redirect_url()),
        }


def _share_reason(request: HttpRequest, next_url: str) -> dict[str, object]:
    """``{"share_login": "fork" | "read", "share_title": …}`` when ``next_url`` (already
    checked to be same-site, or empty) is the page of a live share; the title only where the
    visitor could read the share without logging in (``SHARE_ANONYMOUS_READ``)."""
    if not next_url:
        return {}
    try:
        match = resolve(urlsplit(next_url).path)
    except Resolver404:
        return {}
    if match.url_name != "shared":
        return {}
    try:
        share = sharing.share_for_token(match.kwargs["token"], request.user)
    except NotAuthenticated:
        return {"share_login": "read"}
    except NotFoundError:
        return {}
    return {"share_login": "fork", "share_title": share.session.title}


@login_required
def password_change(request: HttpRequest) -> HttpResponse:
    """Any user's own password change (Django's form and validators). The user's API tokens
    are revoked and their other browser sessions end; this one stays logged in."""
    form = PasswordChangeForm(request.user, request.POST or None)
    if request.method == "POST" and form.is_valid():
        update_session_auth_hash(request, change_password(form=form))
        return render(request, "app/password.html", {"form": None, "changed": True})
    return render(request, "app/password.html", {"form": form}, status=400 if form.errors else 200)


@login_required
def credentials(request: HttpRequest) -> HttpResponse:
    """The user's saved repository credentials: add (name, host, kind, secret), list and
    delete; a secret is never shown back."""
    error = ""
    if request.method == "POST":
        try:
            if request.POST.get("delete"):
                credential_services.delete_credential(
                    owner=request.user, credential_id=request.POST["delete"]
                )
            else:
                form = CredentialIn(data=request.POST)
                if not form.is_valid():
                    field, problems = next(iter(form.errors.items()))
                    raise AppError(f"{field}: {problems[0]}")
                credential_services.save_credential(owner=request.user, **form.validated_data)
            return redirect("credentials")
        except AppError as exc:
            error = exc.message
    rows = credential_services.credentials_of(request.user)
    return render(
        request,
        "app/credentials.html",
        {"credentials": rows, "error": error},
        status=400 if error else 200,
    )


urlpatterns = [
    path("credentials/", credentials, name="credentials"),
    path("", session_list, name="home"),
    path("sessions/new/", session_new, name="session-new"),
    path("sessions/<str:session_id>/", chat, name="chat"),
    path("sessions/<str:session_id>/rename/", session_rename, name="session-rename"),
    path("sessions/<str:session_id>/delete/", session_delete, name="session-delete"),
    path("s/<str:token>/", shared, name="shared"),
    path("login/", LoginPage.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("signup/", account_pages.signup, name="signup"),
    path("invite/<str:token>/", account_pages.invitation, name="invitation"),
    path("password/", password_change, name="password-change"),
]
