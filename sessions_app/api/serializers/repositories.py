"""Real code in and out (docs/semantics.md §13): the repository a session is cloned from, an upload,
a push of the session's work, and the user's saved credentials."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from api.serializers import Choice, In, OneSentence


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


class Port(OneSentence, serializers.IntegerField):
    """A port, 1 to 65535: a JSON number or a form's digits; every refusal one sentence."""

    def __init__(self, **kwargs: Any) -> None:
        message = "port must be a whole number from 1 to 65535."
        bounds = {"min_value": message, "max_value": message}  # DRF's validators say these
        super().__init__(
            min_value=1, max_value=65535, message=message, error_messages=bounds, **kwargs
        )


class CredentialIn(In):
    name = serializers.CharField(max_length=100)
    host = serializers.RegexField(
        r"^[A-Za-z0-9](?:[A-Za-z0-9.-]{0,253}[A-Za-z0-9])?$",
        max_length=255,
        error_messages={"invalid": "host must be a host name such as github.com (no port)."},
        help_text="The host it is sent to (and only there), e.g. github.com.",
    )
    port = Port(
        required=False,
        allow_null=True,
        default=None,
        help_text="The port it is sent to (and only there); none: 443 for a token, 22 for an"
        " ssh key. A URL without a port uses that default.",
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
    port = serializers.IntegerField()
    kind = serializers.CharField()
    created_at = serializers.DateTimeField()
