"""``/api/auth/``: a token for a username and password, its revocation, and the caller's
password change. Failed logins are throttled (``login_throttle``)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import authenticate, update_session_auth_hash
from django.contrib.auth.forms import PasswordChangeForm
from django.http import HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.authtoken.models import Token
from rest_framework.permissions import AllowAny, BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from api.errors import error_body
from api.serializers import In, refuse

from .. import login_throttle
from ..services.accounts import change_password, revoke_api_tokens
from .serializers.account import TokenIn, TokenOut


class AuthTokenView(APIView):
    """``POST``: a token for a username and password (no login needed: it is the login).
    ``DELETE``: the caller's token is revoked (204); any client using it must log in again."""

    http_method_names = ["post", "delete", "options"]

    def _logging_in(self) -> bool:
        """Every method but the revocation is public (a GET answers 405, not 401); while
        the schema is generated there is no request."""
        method = getattr(getattr(self, "request", None), "method", None)
        return method is not None and method != "DELETE"

    def get_authenticators(self) -> list[Any]:
        if self._logging_in():
            return []  # the credentials are in the body; a stale header must not 401 it
        return super().get_authenticators()

    def get_permissions(self) -> list[BasePermission]:
        return [AllowAny()] if self._logging_in() else [IsAuthenticated()]

    @extend_schema(request=TokenIn, responses={200: TokenOut})
    def post(self, request: Request) -> HttpResponse:
        data = TokenIn(data=request.data)
        data.is_valid(raise_exception=True)
        user = authenticate(
            request,
            username=data.validated_data["username"],
            password=data.validated_data["password"],
        )
        if user is None:
            # django-axes marks a login it refused (too many failures of this username from
            # this address, or from this address).
            if getattr(request, "axes_locked_out", False):
                return login_throttle.lockout_response(request)
            return Response(
                error_body("NotAuthenticated", "Wrong username or password."), status=401
            )
        # A token is a login, though no session starts: forget the failures as a form login does.
        login_throttle.forget_failures(request, user.get_username())
        token, _ = Token.objects.get_or_create(user=user)
        return Response({"token": token.key})

    @extend_schema(request=None, responses={204: None})
    def delete(self, request: Request) -> Response:
        revoke_api_tokens(user=request.user)
        return Response(status=204)


class PasswordIn(In):
    old_password = serializers.CharField(trim_whitespace=False, max_length=4096)
    new_password = serializers.CharField(trim_whitespace=False, max_length=4096)


class PasswordView(APIView):
    """``POST {old_password, new_password}``: the caller's new password, checked by Django's
    validators (the page's form: ``PasswordChangeForm``). Every API token of the caller is
    revoked (204; log in again for a new one); the caller's other Django sessions end; a
    browser session that made the change stays logged in."""

    http_method_names = ["post", "options"]

    @extend_schema(request=PasswordIn, responses={204: None})
    def post(self, request: Request) -> Response:
        data = PasswordIn(data=request.data)
        data.is_valid(raise_exception=True)
        form = PasswordChangeForm(
            request.user,
            {
                "old_password": data.validated_data["old_password"],
                "new_password1": data.validated_data["new_password"],
                "new_password2": data.validated_data["new_password"],
            },
        )
        if not form.is_valid():
            raise refuse(form_error(form))
        user = change_password(form=form)
        browser = request._request  # Django's request: its user is the session cookie's
        if getattr(browser, "user", None) is not None and browser.user.pk == user.pk:
            # A browser caller keeps its own session (its auth hash follows the password);
            # a token caller has none to keep, and none is made for it.
            update_session_auth_hash(browser, user)
        return Response(status=204)


def form_error(form: PasswordChangeForm) -> str:
    """The form's first error as one sentence naming the API's field."""
    names = {"new_password1": "new_password", "new_password2": "new_password"}
    for field, errors in form.errors.items():
        name = names.get(field, field)
        message = " ".join(str(e) for e in errors)
        return message if field == "__all__" else f"{name}: {message}"
    return "The password was not changed."
