"""Security round 3, logins and credentials (issue 14): a password change for every user, on a
page and on the API, that rotates the user's API tokens; a token can be revoked; failed logins
lock a username from one address only, so no one can lock a person out from elsewhere, while
a spray across usernames from one address is still stopped."""

from __future__ import annotations

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.conftest import client_for

pytestmark = pytest.mark.django_db

LIMIT = settings.AXES_FAILURE_LIMIT
ADDRESS_LIMIT = settings.LOGIN_ADDRESS_FAILURE_LIMIT
A, B = "203.0.113.7", "198.51.100.9"
NEW = "a-long-and-odd-passphrase-42"


@pytest.fixture(autouse=True)
def _fast_hashes(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def api_login(username: str, password: str, address: str = A):  # noqa: ANN201
    return APIClient(REMOTE_ADDR=address).post(
        "/api/auth/token/", {"username": username, "password": password}, format="json"
    )


def form_login(username: str, password: str, address: str = A):  # noqa: ANN201
    return Client(REMOTE_ADDR=address).post("/login/", {"username": username, "password": password})


def browser_of(user: User, password: str) -> Client:
    """A browser logged in through the login form, with CSRF checks on as in a real one."""
    browser = Client(enforce_csrf_checks=True)
    browser.get("/login/")
    token = browser.cookies[settings.CSRF_COOKIE_NAME].value
    login = {"username": user.username, "password": password, "csrfmiddlewaretoken": token}
    assert browser.post("/login/", login).status_code == 302
    return browser


def csrf(browser: Client) -> str:
    browser.get("/password/")
    return browser.cookies[settings.CSRF_COOKIE_NAME].value


# -- finding 15: who a failure locks ------------------------------------------------------------


def test_wrong_passwords_for_alice_from_one_address_do_not_lock_her_out_elsewhere(owner, outsider):
    for _ in range(LIMIT):
        api_login("alice", "not-the-password", A)
    # A is locked for alice, on both doors...
    assert api_login("alice", "alice-pw", A).status_code == 429
    assert form_login("alice", "alice-pw", A).status_code == 429
    # ...for alice only: someone else behind A logs in...
    assert api_login("mallory", "mallory-pw", A).status_code == 200
    assert form_login("mallory", "mallory-pw", A).status_code == 302
    # ...and alice herself, from B, too.
    assert api_login("alice", "alice-pw", B).status_code == 200
    assert form_login("alice", "alice-pw", B).status_code == 302


def test_the_address_cap_still_stops_a_spray_across_usernames(owner, outsider):
    for i in range(ADDRESS_LIMIT - 1):
        response = api_login(f"guess-{i}", "not-the-password", A)
        assert response.status_code == 401, (i, response.status_code)
    assert api_login("guess-last", "not-the-password", A).status_code == 429  # at the cap
    locked = api_login("mallory", "mallory-pw", A)
    assert locked.status_code == 429
    assert locked.json()["error"]["type"] == "Throttled"
    assert int(locked["Retry-After"]) > 0
    assert form_login("alice", "alice-pw", A).status_code == 429
    assert api_login("alice", "alice-pw", B).status_code == 200


def test_the_address_limit_is_higher_than_the_username_limit():
    assert ADDRESS_LIMIT > LIMIT


def test_failures_below_the_address_cap_lock_nobody_else(owner):
    for i in range(ADDRESS_LIMIT - 1):
        api_login(f"guess-{i}", "not-the-password", A)
    assert api_login("alice", "alice-pw", A).status_code == 200
    assert AccessAttempt.objects.filter(ip_address=A).count() == ADDRESS_LIMIT - 1


# -- finding 13: password change and token revocation --------------------------------------------


def test_the_api_changes_the_password_and_rotates_the_token(owner):
    old_token = api_login("alice", "alice-pw").json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {old_token}")
    response = client.post(
        "/api/auth/password/",
        {"old_password": "alice-pw", "new_password": NEW},
        format="json",
    )
    assert response.status_code == 204, response.content
    assert not Token.objects.filter(key=old_token).exists()
    gone = client.get("/api/sessions/")
    assert gone.status_code == 401
    assert gone.json()["error"]["type"] == "NotAuthenticated"
    assert api_login("alice", "alice-pw").status_code == 401
    new_token = api_login("alice", NEW).json()["token"]
    assert new_token != old_token


@pytest.mark.parametrize(
    "body, words",
    [
        ({"old_password": "wrong", "new_password": NEW}, "old_password: Your old password"),
        ({"old_password": "alice-pw", "new_password": "123"}, "new_password: This password is"),
        ({"old_password": "alice-pw", "new_password": "password"}, "too common"),
        ({"old_password": "alice-pw"}, "new_password"),
    ],
)
def test_the_api_refuses_a_wrong_old_or_weak_new_password_in_the_json_shape(owner, body, words):
    api = client_for(owner)
    token = Token.objects.get(user=owner).key
    response = api.post("/api/auth/password/", body, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["type"] == "ValidationError"
    assert words in error["message"], error
    owner.refresh_from_db()
    assert owner.check_password("alice-pw")
    assert Token.objects.filter(key=token).exists(), "nothing rotated"


def test_anonymous_callers_cannot_change_a_password(owner):
    response = APIClient().post(
        "/api/auth/password/", {"old_password": "alice-pw", "new_password": NEW}, format="json"
    )
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "NotAuthenticated"


def test_a_token_can_be_revoked(owner):
    token = api_login("alice", "alice-pw").json()["token"]
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    assert client.delete("/api/auth/token/").status_code == 204
    assert not Token.objects.filter(user=owner).exists()
    assert client.get("/api/sessions/").status_code == 401
    anonymous = APIClient().delete("/api/auth/token/")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["type"] == "NotAuthenticated"
    # A new login gives a new token.
    assert api_login("alice", "alice-pw").json()["token"] != token


def test_the_api_keeps_csrf_for_cookie_callers(owner):
    browser = browser_of(owner, "alice-pw")
    body = {"old_password": "alice-pw", "new_password": NEW}
    refused = browser.post("/api/auth/password/", body, content_type="application/json")
    assert refused.status_code == 403
    assert browser.delete("/api/auth/token/").status_code == 403
    owner.refresh_from_db()
    assert owner.check_password("alice-pw")
    done = browser.post(
        "/api/auth/password/",
        body,
        content_type="application/json",
        HTTP_X_CSRFTOKEN=csrf(browser),
    )
    assert done.status_code == 204, done.content
    assert browser.get("/api/sessions/").status_code == 200, "this browser stays logged in"


def test_the_page_changes_the_password_keeps_this_session_and_ends_the_others(owner):
    token = Token.objects.create(user=owner).key
    other = browser_of(owner, "alice-pw")
    browser = browser_of(owner, "alice-pw")
    page = browser.get("/")
    assert 'href="/password/"' in page.content.decode(), "reachable from the header"
    form = browser.get("/password/")
    assert form.status_code == 200
    html = form.content.decode()
    assert 'name="old_password"' in html and 'name="new_password1"' in html
    # CSRF stays on.
    assert browser.post("/password/", {"old_password": "alice-pw"}).status_code == 403
    weak = browser.post(
        "/password/",
        {
            "old_password": "alice-pw",
            "new_password1": "123",
            "new_password2": "123",
            "csrfmiddlewaretoken": csrf(browser),
        },
    )
    assert weak.status_code == 400
    assert "This password is too short" in weak.content.decode()
    done = browser.post(
        "/password/",
        {
            "old_password": "alice-pw",
            "new_password1": NEW,
            "new_password2": NEW,
            "csrfmiddlewaretoken": csrf(browser),
        },
    )
    assert done.status_code == 200
    assert 'id="password-changed"' in done.content.decode()
    assert browser.get("/").status_code == 200, "this session stays logged in"
    assert other.get("/").status_code == 302, "the other session is logged out"
    assert not Token.objects.filter(key=token).exists(), "the API token is rotated"
    owner.refresh_from_db()
    assert owner.check_password(NEW)


def test_the_password_page_needs_a_login(db):
    response = Client().get("/password/")
    assert response.status_code == 302
    assert "/login/" in response["Location"]
