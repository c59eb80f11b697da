"""The account's shapes: a token asked for with a username and password."""

from __future__ import annotations

from rest_framework import serializers

from api.serializers import In, Out


class TokenIn(In):
    username = serializers.CharField()
    password = serializers.CharField(trim_whitespace=False)


class TokenOut(Out):
    token = serializers.CharField()
