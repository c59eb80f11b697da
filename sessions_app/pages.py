"""Server-rendered pages of the browser UI; the chat view's behaviour is in static/app.js."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_POST

from .errors import AppError, NotAuthenticated
from .selectors import session_for_user, sessions_for_user
from .services import sharing
from .services.sessions import create_session


@login_required
def session_list(request: HttpRequest) -> HttpResponse:
    return render(request, "app/sessions.html", {"sessions": sessions_for_user(request.user)})


@login_required
@require_POST
def session_new(request: HttpRequest) -> HttpResponse:
    try:
        session = create_session(owner=request.user, title=request.POST.get("title", "").strip())
    except AppError as exc:
        return render(
            request,
            "app/sessions.html",
            {"sessions": sessions_for_user(request.user), "error": exc.message},
            status=400,
        )
    return redirect("chat", session_id=session.id)


@login_required
def chat(request: HttpRequest, session_id: str) -> HttpResponse:
    session = session_for_user(request.user, session_id)
    return render(request, "app/chat.html", {"session": session})


def shared(request: HttpRequest, token: str) -> HttpResponse:
    """A share link: the pinned conversation, read-only, with "fork into my account"."""
    try:
        share = sharing.share_for_token(token, request.user)
    except NotAuthenticated:
        return redirect_to_login(request.get_full_path())
    return render(request, "app/shared.html", {"share": sharing.shared_data(share)})


@login_required
@require_POST
def shared_fork(request: HttpRequest, token: str) -> HttpResponse:
    share = sharing.share_for_token(token, request.user, for_fork=True)
    fork = sharing.fork_shared(share=share, user=request.user)
    return redirect("chat", session_id=fork.id)


urlpatterns = [
    path("", session_list, name="home"),
    path("sessions/new/", session_new, name="session-new"),
    path("sessions/<str:session_id>/", chat, name="chat"),
    path("s/<str:token>/", shared, name="shared"),
    path("s/<str:token>/fork/", shared_fork, name="shared-fork"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="app/login.html"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
