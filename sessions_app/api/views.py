"""Session endpoints: thin views (validate → one service → serialize)."""

from __future__ import annotations

from django.contrib.auth import authenticate
from django.http import FileResponse, HttpResponse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.authtoken.models import Token
from rest_framework.decorators import api_view, authentication_classes, permission_classes
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.utils.urls import remove_query_param, replace_query_param

from .. import login_throttle
from ..errors import InvalidInput
from ..selectors import (
    MessagePage,
    lineage,
    message_data,
    message_page,
    message_tree,
    page_limit,
    part_data,
    part_for_user,
    session_data,
    session_for_user,
    session_message_ids,
    sessions_for_user,
    worktree_entry,
)
from ..services import fork as fork_services
from ..services import revert as revert_services
from ..services import rollback as rollback_services
from ..services import sessions as session_services
from ..services import sharing
from .errors import error_body
from .serializers import ForkIn, HeadIn, RevertIn, RollbackIn, SessionIn, ShareIn, TokenIn


@extend_schema(request=TokenIn, responses={200: dict})
@api_view(["POST"])
@authentication_classes([])
@permission_classes([AllowAny])
def auth_token(request: Request) -> HttpResponse:
    data = TokenIn(data=request.data)
    data.is_valid(raise_exception=True)
    user = authenticate(
        request, username=data.validated_data["username"], password=data.validated_data["password"]
    )
    if user is None:
        # django-axes marks a login it refused (too many failures of this username or address).
        if getattr(request, "axes_locked_out", False):
            return login_throttle.lockout_response(request)
        return Response(error_body("NotAuthenticated", "Wrong username or password."), status=401)
    # A token is a login, though no session starts: forget the failures as a form login does.
    login_throttle.forget_failures(request, user.get_username())
    token, _ = Token.objects.get_or_create(user=user)
    return Response({"token": token.key})


class SessionPages(CursorPagination):
    ordering = "-id"
    page_size_query_param = "limit"

    def get_page_size(self, request: Request) -> int:
        return page_limit(request.query_params.get(self.page_size_query_param))


@extend_schema(
    request=SessionIn,
    responses={200: dict, 201: dict},
    parameters=[
        OpenApiParameter("limit", int, description="Sessions a page (default 50, at most 200)."),
        OpenApiParameter("cursor", str, description="From a page's next/previous link."),
        OpenApiParameter("q", str, description="Only titles containing this."),
    ],
)
@api_view(["GET", "POST"])
def sessions(request: Request) -> Response:
    if request.method == "POST":
        data = SessionIn(data=request.data)
        data.is_valid(raise_exception=True)
        session = session_services.create_session(owner=request.user, **data.validated_data)
        return Response(session_data(session), status=status.HTTP_201_CREATED)
    pages = SessionPages()
    query = request.query_params.get("q", "")[:200]
    page = pages.paginate_queryset(sessions_for_user(request.user, query), request)
    return pages.get_paginated_response([session_data(s) for s in page])


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


def page_response(request: Request, page: MessagePage, **extra: object) -> Response:
    """``{results, next, previous}``: the links keep the request's other parameters."""
    url = request.build_absolute_uri()
    url = remove_query_param(remove_query_param(url, "before"), "after")
    return Response(
        {
            **extra,
            "results": [message_data(m) for m in page.messages],
            "next": replace_query_param(url, "after", page.after) if page.after else None,
            "previous": replace_query_param(url, "before", page.before) if page.before else None,
        }
    )


MESSAGE_PAGE_PARAMETERS = [
    OpenApiParameter("limit", int, description="Messages a page (default 50, at most 200)."),
    OpenApiParameter("before", str, description="The page of older messages before this id."),
    OpenApiParameter("after", str, description="The page of newer messages after this id."),
]


@extend_schema(
    responses={200: dict},
    parameters=[
        *MESSAGE_PAGE_PARAMETERS,
        OpenApiParameter("tree", bool, description="Every branch, in id order."),
    ],
)
@api_view(["GET"])
def session_messages(request: Request, session_id: str) -> Response:
    """The active path (or ``?tree=1``: every message), a page at a time: the first page is
    the one nearest the head, in root → head order; ``previous`` leads to older ones."""
    session = session_for_user(request.user, session_id)
    tree = request.query_params.get("tree") in ("1", "true", "yes")
    params = request.query_params
    page = message_page(
        session_message_ids(session, tree=tree),
        limit=page_limit(params.get("limit")),
        before=params.get("before") or None,
        after=params.get("after") or None,
    )
    return page_response(request, page)


@extend_schema(responses={200: dict})
@api_view(["GET"])
def part_detail(request: Request, part_id: str) -> Response:
    """One part whole: what lists and events cut at ``API_PART_FIELD_MAX``."""
    return Response(part_data(part_for_user(request.user, part_id), whole=True))


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
    try:
        found = worktree_entry(session, path)
    except ValueError as exc:
        raise InvalidInput(str(exc)) from exc
    if isinstance(found, list):
        return Response(found)
    return FileResponse(open(found, "rb"), content_type="text/plain; charset=utf-8")


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


@extend_schema(request=ShareIn, responses={201: dict, 204: None})
@api_view(["POST", "DELETE"])
def session_share(request: Request, session_id: str) -> Response:
    """Pin the head and the files for a link (again: move the pin); DELETE revokes it."""
    session = session_for_user(request.user, session_id)
    if request.method == "DELETE":
        sharing.revoke_share(session=session)
        return Response(status=status.HTTP_204_NO_CONTENT)
    data = ShareIn(data=request.data)
    data.is_valid(raise_exception=True)
    share = sharing.share_session(session=session, user=request.user, **data.validated_data)
    return Response(sharing.share_link(share), status=status.HTTP_201_CREATED)


@extend_schema(
    responses={200: dict},
    parameters=[MESSAGE_PAGE_PARAMETERS[0], MESSAGE_PAGE_PARAMETERS[1]],
)
@api_view(["GET"])
@permission_classes([AllowAny])
def shared_detail(request: Request, token: str) -> Response:
    """The pinned conversation (a page of it, nearest the pin first) and its files."""
    share = sharing.share_for_token(token, request.user)
    data = sharing.shared_data(
        share,
        limit=page_limit(request.query_params.get("limit")),
        before=request.query_params.get("before") or None,
    )
    before = data.pop("previous_before")
    url = remove_query_param(request.build_absolute_uri(), "before")
    data["previous"] = replace_query_param(url, "before", before) if before else None
    return Response(data)


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
