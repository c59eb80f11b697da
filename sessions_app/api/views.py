"""Session endpoints: thin views (validate → one service → serialize)."""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.http import FileResponse, Http404, HttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.authtoken.models import Token
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from ..errors import InvalidInput
from ..selectors import (
    active_path,
    all_messages,
    lineage,
    message_data,
    message_tree,
    session_data,
    session_for_user,
    sessions_for_user,
)
from ..services import fork as fork_services
from ..services import revert as revert_services
from ..services import rollback as rollback_services
from ..services import sessions as session_services
from ..services import sharing
from ..tools_paths import resolve_inside
from .errors import error_body
from .serializers import ForkIn, HeadIn, RevertIn, RollbackIn, SessionIn, TokenIn


@extend_schema(request=TokenIn, responses={200: dict})
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def auth_token(request: Request) -> Response:
    data = TokenIn(data=request.data)
    data.is_valid(raise_exception=True)
    user = authenticate(
        request, username=data.validated_data["username"], password=data.validated_data["password"]
    )
    if user is None:
        return Response(error_body("NotAuthenticated", "Wrong username or password."), status=401)
    token, _ = Token.objects.get_or_create(user=user)
    return Response({"token": token.key})


@extend_schema(request=SessionIn, responses={200: dict, 201: dict})
@api_view(["GET", "POST"])
def sessions(request: Request) -> Response:
    if request.method == "POST":
        data = SessionIn(data=request.data)
        data.is_valid(raise_exception=True)
        session = session_services.create_session(owner=request.user, **data.validated_data)
        return Response(session_data(session), status=status.HTTP_201_CREATED)
    return Response([session_data(s) for s in sessions_for_user(request.user)])


@extend_schema(responses={200: dict, 204: None})
@api_view(["GET", "PATCH", "DELETE"])
def session_detail(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    if request.method == "PATCH":
        if not isinstance(request.data, dict) or set(request.data) - {"title"}:
            raise InvalidInput("Only the title of a session can be changed.")
        title = request.data.get("title")
        return Response(session_data(session_services.rename_session(session=session, title=title)))
    if request.method == "DELETE":
        session_services.delete_session(session=session)
        return Response(status=status.HTTP_204_NO_CONTENT)
    return Response(session_data(session))


@extend_schema(responses={200: dict})
@api_view(["GET"])
def session_messages(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    tree = request.query_params.get("tree") in ("1", "true", "yes")
    messages = all_messages(session) if tree else active_path(session)
    return Response([message_data(m) for m in messages])


@extend_schema(request=HeadIn, responses={200: dict})
@api_view(["POST"])
def session_head(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    data = HeadIn(data=request.data)
    data.is_valid(raise_exception=True)
    session = session_services.switch_head(
        session=session, message_id=data.validated_data["message_id"]
    )
    return Response(session_data(session))


@extend_schema(responses={200: dict})
@api_view(["GET"])
def session_files(request: Request, session_id: str, path: str = "") -> Response | FileResponse:
    session = session_for_user(request.user, session_id)
    root = session.worktree
    try:
        target = resolve_inside(root, path)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    if target.is_dir():
        entries = []
        for child in sorted(target.rglob("*")):
            rel = child.relative_to(root)
            if ".git" in rel.parts or child.is_dir():
                continue
            entries.append({"path": rel.as_posix(), "size": child.stat().st_size})
        return Response(entries)
    if not target.is_file():
        raise Http404("No such file.")
    return FileResponse(open(target, "rb"), content_type="text/plain; charset=utf-8")


@extend_schema(request=RevertIn, responses={200: dict})
@api_view(["POST"])
def session_revert(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    data = RevertIn(data=request.data)
    data.is_valid(raise_exception=True)
    session = revert_services.revert_session(
        session=session, user=request.user, **data.validated_data
    )
    return Response(session_data(session))


@extend_schema(request=None, responses={200: dict})
@api_view(["POST"])
def session_unrevert(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    return Response(
        session_data(revert_services.unrevert_session(session=session, user=request.user))
    )


@extend_schema(request=None, responses={200: dict})
@api_view(["POST"])
def session_cleanup(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    return Response(
        session_data(revert_services.cleanup_session(session=session, user=request.user))
    )


@extend_schema(responses={200: dict})
@api_view(["GET"])
def session_diff(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    message_id = request.query_params.get("message_id") or None
    file = request.query_params.get("file")
    if file is not None:
        if not file or len(file) > 4096 or "\0" in file:
            raise InvalidInput("file must be a path in the worktree.")
        return Response(
            revert_services.session_file_diff(session=session, file=file, message_id=message_id)
        )
    return Response(revert_services.session_diff(session=session, message_id=message_id))


@extend_schema(request=RollbackIn, responses={200: dict})
@api_view(["POST"])
def session_rollback(request: Request, session_id: str) -> Response:
    session = session_for_user(request.user, session_id)
    data = RollbackIn(data=request.data)
    data.is_valid(raise_exception=True)
    session = rollback_services.rollback_session(
        session=session, num_turns=data.validated_data["num_turns"], user=request.user
    )
    return Response(session_data(session))


@extend_schema(request=ForkIn, responses={201: dict})
@api_view(["POST"])
def session_fork(request: Request, session_id: str) -> Response:
    source = session_for_user(request.user, session_id)
    if not isinstance(request.data, dict):
        raise InvalidInput("The body must be a JSON object.")
    data = ForkIn(data=request.data)
    data.is_valid(raise_exception=True)
    fork = fork_services.fork_session(source=source, user=request.user, **data.validated_data)
    return Response(session_data(fork), status=status.HTTP_201_CREATED)


@extend_schema(responses={200: dict})
@api_view(["GET"])
def session_lineage(request: Request, session_id: str) -> Response:
    return Response(lineage(session_for_user(request.user, session_id), request.user))


@extend_schema(responses={200: dict})
@api_view(["GET"])
def session_tree(request: Request, session_id: str) -> Response:
    """Every message's id, parent, role, run and hidden flag: the shape of the tree."""
    return Response(message_tree(session_for_user(request.user, session_id)))


@extend_schema(request=None, responses={201: dict, 204: None})
@api_view(["POST", "DELETE"])
def session_share(request: Request, session_id: str) -> Response:
    """Pin the head and the files for a link (again: move the pin); DELETE revokes it."""
    session = session_for_user(request.user, session_id)
    if request.method == "DELETE":
        sharing.revoke_share(session=session)
        return Response(status=status.HTTP_204_NO_CONTENT)
    share = sharing.share_session(session=session, user=request.user)
    return Response(sharing.share_link(share), status=status.HTTP_201_CREATED)


@extend_schema(responses={200: dict})
@api_view(["GET"])
@permission_classes([AllowAny])
def shared_detail(request: Request, token: str) -> Response:
    share = sharing.share_for_token(token, request.user)
    return Response(sharing.shared_data(share))


@extend_schema(responses={200: dict})
@api_view(["GET"])
@permission_classes([AllowAny])
def shared_files(request: Request, token: str, path: str) -> HttpResponse:
    share = sharing.share_for_token(token, request.user)
    return HttpResponse(sharing.shared_file(share, path), content_type="text/plain; charset=utf-8")


@extend_schema(request=ForkIn, responses={201: dict})
@api_view(["POST"])
def shared_fork(request: Request, token: str) -> Response:
    share = sharing.share_for_token(token, request.user, for_fork=True)
    title = request.data.get("title", "") if isinstance(request.data, dict) else ""
    if not isinstance(title, str):
        raise InvalidInput("title must be a string.")
    fork = sharing.fork_shared(share=share, user=request.user, title=title[:200])
    return Response(session_data(fork), status=status.HTTP_201_CREATED)
