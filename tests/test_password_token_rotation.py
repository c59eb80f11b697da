"""Security round 4, finding 9 (issue 42): a password change anywhere rotates the user's API
tokens — the chat's page and API, the admin's own "Change password", a superuser setting
another user's password in the admin, ``manage.py changepassword`` — at the save that stores
the new hash, once; any other save of a user (``last_login`` at a login, an email) and Django's
re-hash of the same password at login rotate nothing."""

from __future__ import annotations

import io
from unittest import mock

import pytest
from django.contrib.auth.hashers import make_password
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from sessions_app.services import accounts

pytestmark = pytest.mark.django_db

NEW = "a-long-and-odd-passphrase-42"


@pytest.fixture
def root(db) -> User:
    return User.objects.create_superuser("root", "root@example.com", "root-pw")


def _token(user: User) -> str:
    return Token.objects.get_or_create(user=user)[0].key


def _answers(key: str) -> int:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return client.get("/api/sessions/").status_code


def _admin(user: User) -> Client:
    browser = Client()
    browser.force_login(user)
    return browser


def test_the_admins_own_password_change_rotates_their_token(root):
    key = _token(root)
    assert _answers(key) == 200
    done = _admin(root).post(
        "/admin/password_change/",
        {"old_password": "root-pw", "new_password1": NEW, "new_password2": NEW},
    )
    assert done.status_code == 302 and done["Location"].endswith("/admin/password_change/done/")
    assert _answers(key) == 401
    root.refresh_from_db()
    assert root.check_password(NEW)


def test_a_superuser_setting_another_users_password_in_the_admin_rotates_that_token(root, owner):
    key, own = _token(owner), _token(root)
    done = _admin(root).post(
        f"/admin/auth/user/{owner.pk}/password/",
        {"usable_password": "true", "password1": NEW, "password2": NEW},
    )
    assert done.status_code == 302, done.content.decode()[:2000]
    assert _answers(key) == 401
    assert _answers(own) == 200, "the superuser's own token stays"
    owner.refresh_from_db()
    assert owner.check_password(NEW)


def test_disabling_a_users_password_in_the_admin_rotates_that_token(root, owner):
    key = _token(owner)
    done = _admin(root).post(
        f"/admin/auth/user/{owner.pk}/password/",
        {"usable_password": "false", "unset-password": "1"},
    )
    assert done.status_code == 302, done.content.decode()[:2000]
    owner.refresh_from_db()
    assert not owner.has_usable_password()
    assert _answers(key) == 401


def test_manage_py_changepassword_rotates_the_token(owner):
    key = _token(owner)
    with mock.patch("getpass.getpass", return_value=NEW):
        call_command("changepassword", "alice", stdout=io.StringIO())
    assert _answers(key) == 401
    owner.refresh_from_db()
    assert owner.check_password(NEW)


def test_the_chats_password_change_rotates_the_tokens_in_one_place(owner, monkeypatch):
    key = _token(owner)
    calls = []
    revoke = accounts.revoke_api_tokens
    monkeypatch.setattr(accounts, "revoke_api_tokens", lambda **kw: calls.append(1) or revoke(**kw))
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    answer = client.post(
        "/api/auth/password/", {"old_password": "alice-pw", "new_password": NEW}, format="json"
    )
    assert answer.status_code == 204, answer.content
    assert calls == [1], "revoked once, by the save that stored the new hash"
    assert _answers(key) == 401


def test_a_save_that_changes_no_password_rotates_nothing(owner, django_assert_num_queries):
    key = _token(owner)
    owner.email = "alice@example.com"
    owner.save()
    with django_assert_num_queries(1):  # the UPDATE alone: no read of the stored hash
        owner.save(update_fields=["last_login"])
    owner.first_name = "Alice"
    owner.save(update_fields=["first_name", "password"])  # the same hash
    assert Client().login(username="alice", password="alice-pw")  # saves last_login
    assert _answers(key) == 200
    assert Token.objects.get(user=owner).key == key


def test_a_hash_upgrade_at_login_is_no_password_change(owner, settings):
    settings.PASSWORD_HASHERS = [
        "tests.support.fast_db.FastPBKDF2PasswordHasher",
        "django.contrib.auth.hashers.MD5PasswordHasher",
    ]
    User.objects.filter(pk=owner.pk).update(password=make_password("alice-pw", hasher="md5"))
    key = _token(owner)
    login = APIClient().post(
        "/api/auth/token/", {"username": "alice", "password": "alice-pw"}, format="json"
    )
    assert login.status_code == 200
    owner.refresh_from_db()
    assert not owner.password.startswith("md5$"), "Django re-hashed it"
    assert login.json()["token"] == key
    assert _answers(key) == 200


def test_the_demo_user_made_again_keeps_its_token(db):
    call_command("ensure_demo_user", stdout=io.StringIO())
    demo = User.objects.get(username="demo")
    key = _token(demo)
    call_command("ensure_demo_user", stdout=io.StringIO())  # every ./dev serve
    assert _answers(key) == 200
    call_command("ensure_demo_user", "--password", NEW, stdout=io.StringIO())
    assert _answers(key) == 401, "a new password is a password change"
