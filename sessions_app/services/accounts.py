"""A user's own credentials: the password change (the page and the API call the same
function) and the API token's revocation."""

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
    Django's validators passed) and rotate the user's API tokens, in one transaction: a token
    taken with the old password must not outlive it. The Django sessions of the user end by
    themselves (their auth hash no longer matches); the caller keeps its own with
    ``update_session_auth_hash``."""
    with transaction.atomic():
        user = form.save()
        revoke_api_tokens(user=user)
    return user
