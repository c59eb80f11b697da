"""A user's own credentials: the password change (the page and the API call the same
function), the API token's revocation, and the rule that joins them: whenever a user's stored
password changes — here, in the admin, by ``manage.py changepassword`` — their API tokens go
(``note_password_change`` / ``rotate_api_tokens``, the user model's ``pre_save`` and
``post_save``, connected in ``SessionsAppConfig.ready``)."""

from __future__ import annotations

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.forms import PasswordChangeForm
from django.db import transaction
from rest_framework.authtoken.models import Token


def revoke_api_tokens(*, user: AbstractBaseUser) -> int:
    """Delete ``user``'s API tokens: every client holding one must log in again (its
    websockets close at their next recheck, ``socket_watch``). The count deleted."""
    deleted, _ = Token.objects.filter(user=user).delete()
    return deleted


def change_password(*, form: PasswordChangeForm) -> AbstractBaseUser:
    """Save the new password of a valid ``PasswordChangeForm`` (the old password checked,
    Django's validators passed); the save rotates the user's API tokens (``rotate_api_tokens``)
    in the same transaction: a token taken with the old password must not outlive it. The
    Django sessions of the user end by themselves (their auth hash no longer matches); the
    caller keeps its own with ``update_session_auth_hash``."""
    with transaction.atomic():
        return form.save()


def note_password_change(
    sender: type[AbstractBaseUser],
    instance: AbstractBaseUser,
    update_fields: frozenset[str] | None = None,
    raw: bool = False,
    **kwargs: object,
) -> None:
    """``pre_save`` of the user model: whether this save changes the stored password hash,
    for ``rotate_api_tokens``. A save that names its fields without ``password`` (``last_login``
    at every login) costs no query; any other save of an existing user reads the stored hash
    once. Django's own hash upgrade at login (``check_password`` re-hashing the same password
    with a newer hasher: a save of ``password`` alone with ``_password`` cleared, as Django's
    ``password_changed`` reads it too) is not a change of password."""
    instance._rotates_api_tokens = False
    if raw or instance._state.adding or instance.pk is None:
        return
    if update_fields is not None and "password" not in update_fields:
        return
    if update_fields == frozenset({"password"}) and getattr(instance, "_password", None) is None:
        return
    stored = sender._default_manager.filter(pk=instance.pk).values_list("password", flat=True)
    instance._rotates_api_tokens = stored.first() not in (None, instance.password)


def rotate_api_tokens(
    sender: type[AbstractBaseUser], instance: AbstractBaseUser, **kwargs: object
) -> None:
    """``post_save`` of the user model: the password hash changed (``note_password_change``),
    so the user's API tokens go, after the new hash is stored (a token taken with the old
    password just before is gone too)."""
    if getattr(instance, "_rotates_api_tokens", False):
        instance._rotates_api_tokens = False
        revoke_api_tokens(user=instance)
