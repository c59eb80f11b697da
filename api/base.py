"""What every API ViewSet shares: input through serializers, and downloads whose ``?format=``
is the view's own. The session-scoped base (one ``get_object()`` that fetches and authorizes)
is ``sessions_app.api.base``, on top of this."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, viewsets
from rest_framework.negotiation import DefaultContentNegotiation
from rest_framework.renderers import BaseRenderer
from rest_framework.request import Request


class ApiViewSet(viewsets.ViewSet):
    def body(self, serializer: type[serializers.Serializer]) -> dict[str, Any]:
        """The request's JSON body, validated by ``serializer``."""
        data = serializer(data=self.request.data)
        data.is_valid(raise_exception=True)
        return dict(data.validated_data)

    def query(self, serializer: type[serializers.Serializer]) -> dict[str, Any]:
        """The request's query string, validated by ``serializer``."""
        data = serializer(data=self.request.query_params)
        data.is_valid(raise_exception=True)
        return dict(data.validated_data)


class FormatIsTheViewsOwn(DefaultContentNegotiation):
    """``?format=`` chooses what a download answers (an export's JSON or Markdown, an
    archive's or a patch's kind), not a DRF renderer (DRF would answer ``format=markdown``
    with a 404): JSON renders everything else (errors)."""

    def select_renderer(
        self, request: Request, renderers: list[BaseRenderer], format_suffix: str | None = None
    ) -> tuple[BaseRenderer, str]:
        return renderers[0], renderers[0].media_type
