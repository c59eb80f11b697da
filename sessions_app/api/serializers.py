from __future__ import annotations

from rest_framework import serializers


class SessionIn(serializers.Serializer):
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    model = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")
    system_prompt = serializers.CharField(
        required=False, allow_blank=True, max_length=100_000, default=""
    )
    checkpoint = serializers.CharField(required=False, allow_blank=True, default="")


class HeadIn(serializers.Serializer):
    message_id = serializers.CharField(max_length=40)


class TokenIn(serializers.Serializer):
    username = serializers.CharField()
    password = serializers.CharField(trim_whitespace=False)


class RevertIn(serializers.Serializer):
    message_id = serializers.CharField(max_length=40)
    part_id = serializers.CharField(max_length=40, required=False, allow_null=True, default=None)


class RollbackIn(serializers.Serializer):
    num_turns = serializers.JSONField(required=False, allow_null=True, default=None)


class ForkIn(serializers.Serializer):
    message_id = serializers.CharField(max_length=40, required=False, allow_null=True, default=None)
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class ShareIn(serializers.Serializer):
    include_system_prompt = serializers.BooleanField(required=False, default=False)
