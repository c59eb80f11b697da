"""The application's error types; ``api/errors.py`` maps them onto the contract's JSON shape."""

from __future__ import annotations


class AppError(Exception):
    status_code = 400
    type = "ValidationError"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class InvalidInput(AppError):
    status_code = 400
    type = "ValidationError"


class NotFoundError(AppError):
    status_code = 404
    type = "NotFound"


class PermissionDeniedError(AppError):
    """The caller is known but may not do this (not a session of theirs: that is a 404)."""

    status_code = 403
    type = "PermissionDenied"


class SessionBusyError(AppError):
    status_code = 409
    type = "SessionBusyError"

    def __init__(self, message: str = "A run is in progress on this session.") -> None:
        super().__init__(message)


class ConflictError(AppError):
    status_code = 409
    type = "ConflictError"


class NotAuthenticated(AppError):
    status_code = 401
    type = "NotAuthenticated"


class QuotaExceeded(AppError):
    """A per-user limit (``quotas_app``); ``retry_after``: seconds until it resets, when it
    resets by time (the API sends it as ``Retry-After``), and ``resets_at`` the moment (the
    error's ``resets_at``, ISO 8601: the chat shows it in the reader's own time format)."""

    status_code = 429
    type = "QuotaExceeded"

    def __init__(
        self, message: str, *, retry_after: int | None = None, resets_at: str | None = None
    ) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.resets_at = resets_at


class TooManyWaits(AppError):
    """A user already holds the most requests that wait for their runs to end (``wait: true``,
    ``RUN_WAITS_PER_USER_MAX``): 429, and the run is not started."""

    status_code = 429
    type = "TooManyWaits"
