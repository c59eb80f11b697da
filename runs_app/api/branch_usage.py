"""``GET /api/sessions/{id}/usage/``: a session's own usage, what its history cost where it
was forked from, and each branch's own (``runs_app.branch_usage`` says exactly what each
counts)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.request import Request
from rest_framework.response import Response

from api.serializers import Out
from sessions_app.api.base import SessionScopedViewSet

from ..branch_usage import branch_usage


class BranchUsageSumsOut(Out):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cached_input_tokens = serializers.IntegerField()
    calls = serializers.IntegerField()
    cost_usd = serializers.FloatField()


class BranchUsageOut(Out):
    head_message_id = serializers.CharField(help_text="The branch's leaf.")
    own = BranchUsageSumsOut(help_text="The own calls whose messages are on root → leaf.")


class SessionUsageOut(Out):
    own = BranchUsageSumsOut(help_text="The session's own runs.")
    inherited = BranchUsageSumsOut(
        help_text="The calls of the history it was forked with, counted in its origin."
    )
    branches = BranchUsageOut(many=True, help_text="Newest leaf first; at most 100.")
    truncated = serializers.BooleanField(help_text="More branches than listed.")


class SessionUsageViewSet(SessionScopedViewSet):
    @extend_schema(responses={200: SessionUsageOut})
    def usage(self, request: Request, session_id: str) -> Response:
        return Response(branch_usage(self.get_object()))
