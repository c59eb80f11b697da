"""Server-rendered pages of the browser UI; the chat view's behaviour is in static/app.js."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_POST

from .errors import AppError
from .selectors import session_for_user, sessions_for_user
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


urlpatterns = [
    path("", session_list, name="home"),
    path("sessions/new/", session_new, name="session-new"),
    path("s/<str:session_id>/", chat, name="chat"),
    path(
        "login/",
        auth_views.LoginView.as_view(template_name="app/login.html"),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
]
