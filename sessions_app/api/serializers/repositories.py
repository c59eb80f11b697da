"""Real code in and out (SEMANTICS 13): the repository a session is cloned from, an upload, a
push of the session's work, and the user's saved credentials."""

from __future__ import annotations

from rest_framework import serializers

from .base import Choice, In


# -- input ------------------------------------------------------------------------------------
class RepositoryIn(In):
    url = serializers.CharField(
        max_length=2000, help_text="https://, ssh:// (or user@host:path) or git:// URL."
    )
    ref = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=200,
        default="",
        help_text="A branch, a tag or a commit id; empty: the remote's default branch.",
    )
    depth = serializers.IntegerField(
        required=False,
        min_value=0,
        max_value=1_000_000,
        default=1,
        help_text="Commits of history to fetch; 0: all of it.",
    )
    credential_id = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=40, default=None
    )


class UploadIn(In):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class PushIn(In):
    branch = serializers.CharField(max_length=200, help_text="The remote branch to push to.")
    credential_id = serializers.CharField(
        required=False, allow_null=True, allow_blank=True, max_length=40, default=None
    )


class CredentialIn(In):
    name = serializers.CharField(max_length=100)
    host = serializers.RegexField(
        r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,253}[A-Za-z0-9])?$",
        max_length=255,
        help_text="The host it is sent to (and only there), e.g. github.com.",
    )
    kind = Choice(("token", "ssh_key"), message="kind must be one of token, ssh_key.")
    secret = serializers.CharField(
        max_length=16384, trim_whitespace=False, write_only=True, help_text="Never shown back."
    )


# -- output -----------------------------------------------------------------------------------
class PushOut(serializers.Serializer):
    remote = serializers.CharField()
    branch = serializers.CharField()
    commit = serializers.CharField()


class CredentialOut(serializers.Serializer):
    id = serializers.CharField()
    name = serializers.CharField()
    host = serializers.CharField()
    kind = serializers.CharField()
    created_at = serializers.DateTimeField()
