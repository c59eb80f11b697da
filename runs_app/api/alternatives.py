"""Best-of-N (docs/semantics.md §14.3): ``POST /api/sessions/{id}/alternatives/`` starts N
forks running the same input at once;
``POST /api/sessions/{id}/adopt/`` makes one of them (or any fork) a branch of this session.
The logic is ``services.alternatives``."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import In, StrictWholeNumber
from sessions_app.api.base import SessionScopedViewSet
from sessions_app.api.serializers.sessions import SessionOut
from sessions_app.selectors import session_data

from ..services import alternatives
from .serializers import UserMessageIn


class AlternativesIn(In):
    message_id = serializers.CharField(
        max_length=40, help_text="The message whose turn runs again (a user message's own)."
    )
    n = StrictWholeNumber(
        min_value=alternatives.N_MIN,
        max_value=alternatives.N_MAX,
        message=f"n must be a whole number from {alternatives.N_MIN} to {alternatives.N_MAX}.",
        help_text="How many: 2–8.",
    )
    messages = UserMessageIn(
        many=True,
        required=False,
        max_length=20,
        help_text="Another input instead: run after message_id.",
    )


class AlternativesOut(serializers.Serializer):
    group = serializers.CharField()
    sessions = serializers.ListField(child=serializers.CharField())


class AdoptIn(In):
    session_id = serializers.CharField(max_length=40, help_text="An alternative or any fork.")


class AlternativesViewSet(SessionScopedViewSet):
    @extend_schema(request=AlternativesIn, responses={201: AlternativesOut})
    def alternatives(self, request: Request, session_id: str) -> Response:
        """N forks at the point before the message's turn, each running that turn's input
        (or ``messages``) at once, each with its own worktree; quotas count all N and a
        refusal names the limit before anything starts."""
        session = self.get_object()
        args = self.body(AlternativesIn)
        result = alternatives.start_alternatives(
            session=session,
            user=request.user,
            message_id=args["message_id"],
            n=args["n"],
            messages=args.get("messages") or None,
        )
        return Response(result, status=status.HTTP_201_CREATED)

    @extend_schema(request=AdoptIn, responses={200: SessionOut})
    def adopt(self, request: Request, session_id: str) -> Response:
        """The fork's messages after its fork point become a new branch here, with its
        files, and the head."""
        session = self.get_object()
        args = self.body(AdoptIn)
        adopted = alternatives.adopt(session=session, user=request.user, fork_id=args["session_id"])
        return Response(session_data(adopted))
