"""The base of every ViewSet under ``/api/sessions/{session_id}/``: one ``get_object()`` that
fetches the caller's session and authorizes it (outsiders get a 404, so no existence leaks).
The rest every ViewSet shares is ``api.base``."""

from __future__ import annotations

from api.base import ApiViewSet

from ..models import Session
from ..selectors import session_for_user


class SessionScopedViewSet(ApiViewSet):
    # Routes under ``/api/sessions/{session_id}/``: the object is the caller's session.

    def get_object(self) -> Session:
        return session_for_user(self.request.user, self.kwargs["session_id"])
