"""The login page says why it is shown when it stands between a visitor and a share link, and
sends them back there; ``next`` is trusted only as a same-site share path (issue 17, item 2)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from django.test import Client

from tests.conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

TITLE = 'Trip <b>plan</b> & "more"'


@pytest.fixture
def sid(api) -> str:
    sid = new_session(api, title=TITLE)
    run_turn(api, sid, "say planned")
    return sid


@pytest.fixture
def link(api, sid) -> str:
    return api.post(f"/api/sessions/{sid}/share/").json()["url"]


def login_page(next_url: str) -> str:
    response = Client().get(f"/login/?next={quote(next_url, safe='')}")
    assert response.status_code == 200
    return response.content.decode()


def test_it_names_the_shared_session_to_fork_when_anonymous_visitors_may_read_it(link, settings):
    settings.SHARE_ANONYMOUS_READ = True
    html = login_page(link)
    assert (
        "Log in to fork the shared session “Trip &lt;b&gt;plan&lt;/b&gt; &amp; &quot;more&quot;”"
        " into your account." in html
    )
    assert "<b>plan</b>" not in html
    assert f'name="next" value="{link}"' in html


def test_it_keeps_the_title_of_a_share_only_members_may_read(link, settings):
    settings.SHARE_ANONYMOUS_READ = False
    html = login_page(link)
    assert "Log in to see the shared session you were sent a link to" in html
    assert "plan" not in html


def test_the_share_page_sends_anonymous_visitors_to_a_login_that_says_why(link, settings):
    settings.SHARE_ANONYMOUS_READ = False
    client = Client()
    redirected = client.get(link)
    assert redirected.status_code == 302
    assert "shared session" in client.get(redirected["Location"]).content.decode()


def test_after_logging_in_the_visitor_is_back_on_the_share_page(link, outsider, settings):
    settings.SHARE_ANONYMOUS_READ = False
    client = Client()
    response = client.post(
        f"/login/?next={link}", {"username": "mallory", "password": "mallory-pw", "next": link}
    )
    assert response.status_code == 302 and response["Location"] == link
    assert client.get(link).status_code == 200


@pytest.mark.parametrize(
    "next_url",
    [
        "https://evil.example{link}",
        "//evil.example{link}",
        "{link}x/",
        "/s/not-a-token/",
        '/s/"><script>alert(1)</script>/',
    ],
)
def test_other_next_urls_get_the_generic_reason_and_are_not_echoed(link, settings, next_url):
    settings.SHARE_ANONYMOUS_READ = True
    next_url = next_url.format(link=link)
    html = login_page(next_url)
    assert "shared session" not in html
    assert "evil.example" not in html and "<script>alert" not in html


def test_a_revoked_share_is_not_named(api, sid, link, settings):
    settings.SHARE_ANONYMOUS_READ = True
    assert api.delete(f"/api/sessions/{sid}/share/").status_code in (200, 204)
    assert "shared session" not in login_page(link)


def test_a_plain_login_says_nothing_more_and_a_redirected_one_asks_to_continue(db):
    assert 'id="login-reason"' not in Client().get("/login/").content.decode()
    assert "Log in to continue." in login_page("/sessions/ses_x/")
