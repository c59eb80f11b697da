"""What every API ViewSet shares: input through serializers, and one ``get_object()`` that
fetches and authorizes (outsiders get a 404, so no existence leaks)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers, viewsets

from ..models import Session
from ..selectors import session_for_user


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


class SessionScopedViewSet(ApiViewSet):
    # Routes under ``/api/sessions/{session_id}/``: the object is the caller's session.

    def get_object(self) -> Session:
        return session_for_user(self.request.user, self.kwargs["session_id"])
