"""Adding people without a shell (issue 46, point 15): ``SIGNUP`` off (404), open (active and
logged in) or approval (inactive until an admin approves it, and the login says so); the
password validators and the login throttle apply to sign-up; invitation links made in the
admin make an active account once, before their expiry, whatever ``SIGNUP`` says."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.models import User
from django.test import Client
from django.utils import timezone

from sessions_app.accounts import services
from sessions_app.accounts.models import Invitation, SignUp

pytestmark = pytest.mark.django_db
PASSWORD = "long-pass-123!"
HERE = "203.0.113.40"


@pytest.fixture(autouse=True)
def _fast_hashes(settings) -> None:
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


def sign_up(client: Client, username: str, password: str = PASSWORD, confirm: str | None = None):  # noqa: ANN201
    form = {"username": username, "password1": password, "password2": confirm or password}
    return client.post("/signup/", form)


@pytest.fixture
def admin_client(db) -> Client:
    User.objects.create_superuser("root", "root@example.org", PASSWORD)
    client = Client()
    client.force_login(User.objects.get(username="root"))
    return client


def test_signup_is_off_by_default_and_documented(settings) -> None:
    assert settings.SIGNUP == "off"
    assert Client().get("/signup/").status_code == 404
    assert sign_up(Client(), "mallory").status_code == 404
    assert not User.objects.filter(username="mallory").exists()
    assert b"Create an account" not in Client().get("/login/").content
    doc = (settings.BASE_DIR / "docs" / "configuration.md").read_text()
    row = next(line for line in doc.splitlines() if line.startswith("| `SIGNUP` |"))
    assert "off" in row.split("|")[2] and "approval" in row, row
    assert "ALLOW_SIGNUP" in doc and "alias" in doc


def test_open_signup_makes_an_active_account_and_logs_in(settings) -> None:
    settings.SIGNUP = "open"
    assert b"Create an account" in Client().get("/login/").content
    browser = Client(REMOTE_ADDR=HERE)
    assert sign_up(browser, "carol").status_code == 302
    carol = User.objects.get(username="carol")
    assert carol.is_active and carol.signup.approved_at is not None
    assert browser.get("/").status_code == 200, "logged in"


def test_allow_signup_still_means_open(settings) -> None:
    settings.ALLOW_SIGNUP = True
    assert services.signup_mode() == "open"
    assert sign_up(Client(), "erin").status_code == 302
    assert User.objects.get(username="erin").is_active


def test_weak_password_is_refused(settings) -> None:
    settings.SIGNUP = "approval"
    for weak in ("a", "password", "12345678901", "carol"):
        answer = sign_up(Client(), "carol", weak)
        assert answer.status_code == 400, weak
    assert sign_up(Client(), "carol", PASSWORD, "other-pass-456!").status_code == 400
    assert not User.objects.filter(username="carol").exists()


def test_approval_waits_for_an_admin_who_approves(settings, admin_client) -> None:
    settings.SIGNUP = "approval"
    page = sign_up(Client(REMOTE_ADDR=HERE), "dana")
    assert page.status_code == 200
    assert b"waiting for an administrator to approve it" in page.content
    dana = User.objects.get(username="dana")
    assert not dana.is_active and dana.signup.approved_at is None

    login = Client().post("/login/", {"username": "dana", "password": PASSWORD})
    assert login.status_code == 200
    assert b"waiting for an administrator to approve it" in login.content
    wrong = Client().post("/login/", {"username": "dana", "password": "not-hers-123"})
    assert b"Wrong username or password" in wrong.content
    assert b"waiting for an administrator" not in wrong.content

    # An account an admin made inactive by hand is not "waiting".
    User.objects.create_user("gone", password=PASSWORD, is_active=False)
    listing = admin_client.get("/admin/auth/user/", {"signup": "waiting"})
    assert listing.status_code == 200
    names = set(re.findall(r'field-username"><a [^>]*>([^<]+)<', listing.content.decode()))
    assert names == {"dana"}, names

    done = admin_client.post(
        "/admin/auth/user/",
        {"action": "approve", "_selected_action": [dana.pk, User.objects.get(username="gone").pk]},
        follow=True,
    )
    assert b"1 account(s) approved" in done.content
    dana.refresh_from_db()
    assert dana.is_active and dana.signup.approved_by.username == "root"
    assert not User.objects.get(username="gone").is_active
    browser = Client()
    assert browser.post("/login/", {"username": "dana", "password": PASSWORD}).status_code == 302
    assert browser.get("/").status_code == 200


def test_outsiders_cannot_approve_or_invite(settings, owner) -> None:
    settings.SIGNUP = "approval"
    sign_up(Client(), "dana")
    dana = User.objects.get(username="dana")
    outsider = Client()
    outsider.force_login(owner)  # a user, not staff
    answer = outsider.post(
        "/admin/auth/user/", {"action": "approve", "_selected_action": [dana.pk]}
    )
    assert answer.status_code == 302 and "/admin/login/" in answer["Location"]
    assert outsider.post("/admin/accounts/invitation/add/", {"note": "x"}).status_code == 302
    dana.refresh_from_db()
    assert not dana.is_active and not Invitation.objects.exists()


def test_a_signup_flood_from_one_address_is_throttled(settings) -> None:
    settings.SIGNUP = "open"
    limit = settings.AXES_FAILURE_LIMIT
    for i in range(limit):
        assert sign_up(Client(REMOTE_ADDR=HERE), f"bot{i}").status_code == 302, i
    refused = sign_up(Client(REMOTE_ADDR=HERE), "bot-more")
    assert refused.status_code == 429 and int(refused["Retry-After"]) > 0
    assert b"Too many sign-ups" in refused.content
    assert not User.objects.filter(username="bot-more").exists()
    # Another address signs up; a user of the flooded address still logs in.
    assert sign_up(Client(REMOTE_ADDR="198.51.100.3"), "someone").status_code == 302
    login = Client(REMOTE_ADDR=HERE).post("/login/", {"username": "bot0", "password": PASSWORD})
    assert login.status_code == 302
    # The cool-off over, sign-up works again.
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME * 2)
    assert sign_up(Client(REMOTE_ADDR=HERE), "bot-later").status_code == 302


def invite(admin_client: Client, note: str = "for Frank") -> str:
    made = admin_client.post("/admin/accounts/invitation/add/", {"note": note}, follow=True)
    assert made.status_code == 200
    link = re.search(r"http://testserver(/invite/[^/\s<]+/)", made.content.decode())
    assert link, made.content.decode()[:3000]
    return link.group(1)


def test_an_invitation_makes_an_active_account_once_even_with_signup_off(admin_client) -> None:
    assert settings.SIGNUP == "off"
    path = invite(admin_client)
    invitation = Invitation.objects.get()
    assert invitation.note == "for Frank" and invitation.token_hash not in path
    guest = Client()
    assert guest.get(path).status_code == 200
    assert (
        guest.post(path, {"username": "frank", "password1": "a", "password2": "a"}).status_code
        == 400
    )
    form = {"username": "frank", "password1": PASSWORD, "password2": PASSWORD}
    assert guest.post(path, form).status_code == 302
    frank = User.objects.get(username="frank")
    assert frank.is_active and not SignUp.objects.filter(user=frank).exists()
    assert guest.get("/").status_code == 200, "logged in"

    again = Client().post(path, {**form, "username": "frank2"})
    assert again.status_code == 410 and b"already been used" in again.content
    assert not User.objects.filter(username="frank2").exists()
    assert b"already been used" in Client().get(path).content
    listing = admin_client.get("/admin/accounts/invitation/").content.decode()
    assert "for Frank" in listing and "used" in listing
    change = admin_client.get(f"/admin/accounts/invitation/{invitation.pk}/change/")
    assert change.status_code == 200 and "frank" in change.content.decode()
    unknown = Client().get("/invite/not-a-token/")
    assert unknown.status_code == 404 and b"not valid" in unknown.content


def test_an_expired_invitation_says_so(admin_client) -> None:
    path = invite(admin_client)
    Invitation.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    form = {"username": "gina", "password1": PASSWORD, "password2": PASSWORD}
    answer = Client().post(path, form)
    assert answer.status_code == 410 and b"expired" in answer.content
    assert not User.objects.filter(username="gina").exists()
    assert Client().get(path).status_code == 410


def test_signup_forms_need_the_csrf_token(settings) -> None:
    settings.SIGNUP = "open"
    strict = Client(enforce_csrf_checks=True)
    assert sign_up(strict, "henry").status_code == 403
    assert not User.objects.filter(username="henry").exists()
