"""A sign-up's record (so that "waiting" means an account that signed up and was never
approved, not any inactive account) and an invitation link (only its token's hash is kept)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class SignUp(models.Model):
    """An account made at ``/signup/``. ``approved_at`` is set when an admin approves it (with
    ``SIGNUP=approval``), or at once when sign-up is open."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="signup"
    )
    created_at = models.DateTimeField(default=timezone.now)
    approved_at = models.DateTimeField(null=True, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )

    class Meta:
        verbose_name = "sign-up"

    def __str__(self) -> str:
        return f"sign-up of {self.user_id}"


class Invitation(models.Model):
    """A single-use link to make an active account, valid until ``expires_at``."""

    token_hash = models.CharField(max_length=64, unique=True, editable=False)
    note = models.CharField(
        max_length=200, blank=True, help_text="For whom (shown here only, never to the guest)."
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    used_at = models.DateTimeField(null=True, blank=True)
    used_by = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="invitation",
    )

    def __str__(self) -> str:
        return self.note or f"invitation {self.pk}"

    @property
    def state(self) -> str:
        if self.used_at is not None:
            return "used"
        if self.expires_at <= timezone.now():
            return "expired"
        return "open"
