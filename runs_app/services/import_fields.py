"""The field checks of an import (``import_checks``, ``import_files``): each takes a value and
the place it is at (``messages[3].role``) and returns the value, or raises ``InvalidInput``
with a sentence that names the place. ``fields`` checks an object against a spec of them:
the required fields there, no unknown one."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime

from core.errors import InvalidInput
from sessions_app import permissions
from workspace.git_names import refused_component
from workspace.worktree_files import plain_relative

INT_MAX = 2**31 - 1  # an integer column
TREE_ID = re.compile(r"[0-9a-f]{40}")

Check = Callable[[Any, str], Any]
REQUIRED = object()


def quoted(key: Any) -> str:
    """A value of the document as a refusal names it: quoted, and cut if it is long."""
    text = str(key)
    return repr(text if len(text) <= 60 else text[:60] + "…")


def fields(value: Any, where: str, spec: dict[str, tuple[Check, Any]]) -> dict[str, Any]:
    """``value`` as an object of exactly ``spec``'s fields (name → (check, default); the
    default ``REQUIRED`` makes the field required), each checked."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be an object.")
    for key in value:
        if key not in spec:
            raise InvalidInput(f"{where or 'The export'} has an unknown field {quoted(key)}.")
    out = {}
    for key, (check, default) in spec.items():
        place = f"{where}.{key}" if where else key
        if key in value:
            out[key] = check(value[key], place)
        elif default is REQUIRED:
            raise InvalidInput(f"{place} is missing.")
        else:
            out[key] = default() if callable(default) else default
    return out


def text(limit: int | None = None, *, null: bool = False, blank: bool = True) -> Check:
    def check(value: Any, where: str) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, str) or (not blank and not value):
            kind = "a string" if blank else "a non-empty string"
            raise InvalidInput(f"{where} must be {kind}{' or null' if null else ''}.")
        if limit is not None and len(value) > limit:
            raise InvalidInput(f"{where} must be at most {limit:,} characters.")
        return value

    return check


def whole(low: int = 0, high: int = INT_MAX, *, null: bool = False) -> Check:
    def check(value: Any, where: str) -> int | None:
        if value is None and null:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise InvalidInput(f"{where} must be a whole number from {low:,} to {high:,}.")
        return value

    return check


def choice(values: tuple[str, ...] | list[str], *, null: bool = False) -> Check:
    def check(value: Any, where: str) -> str | None:
        if value is None and null:
            return None
        if value not in values:
            raise InvalidInput(f"{where} must be one of {', '.join(values)}.")
        return value

    return check


def moment(*, null: bool = False) -> Check:
    def check(value: Any, where: str) -> dt.datetime | None:
        if value is None and null:
            return None
        try:
            parsed = parse_datetime(value) if isinstance(value, str) else None
            if parsed is not None:
                if timezone.is_naive(parsed):
                    parsed = timezone.make_aware(parsed, dt.UTC)
                return parsed.astimezone(dt.UTC)
        except (ValueError, OverflowError):
            pass
        raise InvalidInput(f"{where} must be an ISO 8601 date and time.")

    return check


def flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidInput(f"{where} must be true or false.")
    return value


def anything(value: Any, where: str) -> Any:
    return value


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidInput(f"{where} must be an object.")
    return value


def obj_or_null(value: Any, where: str) -> dict[str, Any] | None:
    return None if value is None else obj(value, where)


def array(value: Any, where: str) -> list[Any]:
    if not isinstance(value, list):
        raise InvalidInput(f"{where} must be a list.")
    return value


def objects_list(value: Any, where: str) -> list[dict[str, Any]]:
    for i, item in enumerate(array(value, where)):
        obj(item, f"{where}[{i}]")
    return value


def tree_id(*, null: bool = False) -> Check:
    def check(value: Any, where: str) -> str | None:
        if value is None and null:
            return None
        if not isinstance(value, str) or not TREE_ID.fullmatch(value):
            raise InvalidInput(f"{where} must be a git tree id (40 lowercase hex digits).")
        return value

    return check


def relative_path(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"{where} must be a string.")
    try:
        plain_relative(value)
    except ValueError as exc:
        raise InvalidInput(f"{where}: {exc}") from None
    if any(refused_component(part) for part in value.split("/")):
        raise InvalidInput(f"{where}: {quoted(value)} names a directory git keeps to itself.")
    return value


def relative_paths(value: Any, where: str) -> list[str]:
    return [relative_path(item, f"{where}[{i}]") for i, item in enumerate(array(value, where))]


def tree_ids(value: Any, where: str) -> list[str]:
    check = tree_id()
    return [check(item, f"{where}[{i}]") for i, item in enumerate(array(value, where))]


def rules(value: Any, where: str) -> dict[str, Any]:
    try:
        return permissions.validate(value)
    except ValueError as exc:
        raise InvalidInput(f"{where}: {exc}") from None


def bounded(check: Check, limit: int, what: str) -> Check:
    """``check`` of a list that holds at most ``limit`` items (the setting named ``what``)."""

    def checked(value: Any, where: str) -> Any:
        if isinstance(value, list) and len(value) > limit:
            raise InvalidInput(
                f"{where} holds {len(value):,} items; an import takes at most {limit:,} ({what})."
            )
        return check(value, where)

    return checked


ID = text(40, blank=False)
REF = text(40, null=True)
