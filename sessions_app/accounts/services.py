"""Sign-ups and invitations: who may make an account, in what state, and an admin's approval.
The views (``pages``) and the admin (``admin``) are thin; the writes are here, one transaction
each."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.forms import BaseUserCreationForm
from django.db import transaction
from django.db.models import QuerySet
from django.utils import timezone

from core.errors import AppError, NotFoundError

from .models import Invitation, SignUp

MODES = ("off", "open", "approval")


class InvitationUnusable(AppError):
    """A link already used or past its expiry: 410, said on the page."""

    status_code = 410
    type = "Gone"


def signup_mode() -> str:
    """``SIGNUP`` (off, open, approval); the older ``ALLOW_SIGNUP=true`` reads as ``open``."""
    mode = settings.SIGNUP
    if mode == "off" and settings.ALLOW_SIGNUP:
        return "open"
    return mode


@transaction.atomic
def sign_up(form: BaseUserCreationForm) -> AbstractBaseUser:
    """The account of a valid sign-up form: active when sign-up is open, inactive (waiting for
    an admin) with ``SIGNUP=approval``. Its quotas are the deployment's defaults, as for any
    user added in the admin."""
    approval = signup_mode() == "approval"
    user = form.save(commit=False)
    user.is_active = not approval
    user.save()
    SignUp.objects.create(user=user, approved_at=None if approval else timezone.now())
    return user


def waiting_users() -> QuerySet:
    """Accounts that signed up and were never approved (an account an admin made inactive
    by hand is not one of them)."""
    return get_user_model().objects.filter(
        is_active=False, signup__isnull=False, signup__approved_at__isnull=True
    )


def is_waiting(username: str, password: str) -> bool:
    """Whether these are the right credentials of an account waiting for approval: the login
    says so instead of "wrong password" — only to someone who knows the password."""
    user = waiting_users().filter(username=username).first()
    return user is not None and user.check_password(password)


@transaction.atomic
def approve(users: QuerySet, *, by: AbstractBaseUser) -> int:
    """Activate the waiting accounts among ``users``; the number activated."""
    ids = list(waiting_users().filter(pk__in=users.values("pk")).values_list("pk", flat=True))
    get_user_model().objects.filter(pk__in=ids).update(is_active=True)
    SignUp.objects.filter(user_id__in=ids).update(approved_at=timezone.now(), approved_by=by)
    return len(ids)


def _hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_invitation(*, by: AbstractBaseUser, note: str = "") -> tuple[Invitation, str]:
    """An invitation valid for ``INVITATION_DAYS``, and its token: shown once (only its hash
    is kept)."""
    token = secrets.token_urlsafe(32)
    invitation = Invitation.objects.create(
        token_hash=_hash(token),
        note=note,
        created_by=by,
        expires_at=timezone.now() + timedelta(days=settings.INVITATION_DAYS),
    )
    return invitation, token


def invitation_for(token: str) -> Invitation:
    """The invitation of ``token`` whatever its state; NotFoundError if there is none."""
    invitation = Invitation.objects.filter(token_hash=_hash(token)).first()
    if invitation is None:
        raise NotFoundError("This invitation link is not valid: check that it was copied whole.")
    return invitation


def unusable_reason(invitation: Invitation) -> str:
    if invitation.state == "used":
        return "This invitation link has already been used: each link makes one account."
    if invitation.state == "expired":
        return "This invitation link has expired: ask the administrator for a new one."
    return ""


@transaction.atomic
def accept_invitation(token: str, form: BaseUserCreationForm) -> AbstractBaseUser:
    """An active account from a valid form and an open invitation, which is then used up.
    The invitation row is locked: two forms sent at once make one account."""
    invitation = invitation_for(token)
    invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
    reason = unusable_reason(invitation)
    if reason:
        raise InvitationUnusable(reason)
    user = form.save()
    invitation.used_at = timezone.now()
    invitation.used_by = user
    invitation.save(update_fields=["used_at", "used_by"])
    return user
