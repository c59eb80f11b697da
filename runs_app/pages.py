"""Pages that make or copy runs: the fork button of a shared conversation."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import path
from django.views.decorators.http import require_POST

from sessions_app.pages import found_or_404
from sessions_app.services import sharing

from .services.fork import fork_shared


@login_required
@require_POST
@found_or_404
def shared_fork(request: HttpRequest, token: str) -> HttpResponse:
    share = sharing.share_for_token(token, request.user, for_fork=True)
    fork = fork_shared(share=share, user=request.user)
    return redirect("chat", session_id=fork.id)


urlpatterns = [path("s/<str:token>/fork/", shared_fork, name="shared-fork")]
