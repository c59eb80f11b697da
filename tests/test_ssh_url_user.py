"""Security round 4, finding 7 (issue 42): an ssh URL's user is a plain name. ssh takes a user
that starts with "-" for an option (``-oProxyCommand=…``) and git decodes %-escapes in it: both
spellings, in ssh:// URLs and the scp-like form, are refused before anything is stored."""

from __future__ import annotations

import pytest

from sessions_app.models import Session
from workspace import repos

pytestmark = pytest.mark.django_db


REFUSED_USERS = [
    "ssh://-oProxyCommand=touch@127.0.0.1/x.git",
    "ssh://%2DoProxyCommand=touch@127.0.0.1/x.git",
    "ssh://%2doProxyCommand@127.0.0.1/x.git",
    "ssh://git%40evil@127.0.0.1/x.git",
    "ssh://@127.0.0.1/x.git",
    f"ssh://{'a' * 65}@127.0.0.1/x.git",
    "-oProxyCommand=touch@127.0.0.1:x.git",
    "-x@127.0.0.1:x.git",
    "%2Dx@127.0.0.1:x.git",
]


@pytest.mark.parametrize("url", REFUSED_USERS)
def test_it_refuses_an_ssh_user_that_is_not_a_plain_name(settings, url):
    settings.GIT_ALLOWED_HOSTS = ["127.0.0.1"]
    with pytest.raises(repos.RepoError, match="plain name"):
        repos.check_url(url)


@pytest.mark.parametrize(
    "url, user",
    [
        ("ssh://git@127.0.0.1/x.git", "git"),
        ("git@127.0.0.1:org/x.git", "git"),
        ("deploy.bot_1-x@127.0.0.1:x.git", "deploy.bot_1-x"),
        (f"ssh://{'a' * 64}@127.0.0.1:2222/x.git", "a" * 64),
        ("ssh://127.0.0.1/x.git", None),
    ],
)
def test_it_accepts_a_plain_ssh_user(settings, url, user):
    settings.GIT_ALLOWED_HOSTS = ["127.0.0.1"]
    remote = repos.check_url(url)
    assert remote.scheme == "ssh" and remote.pinned_url.startswith(
        f"ssh://{user}@" if user else "ssh://127"
    )


@pytest.mark.parametrize("url", [REFUSED_USERS[0], REFUSED_USERS[1], REFUSED_USERS[6]])
def test_the_api_refuses_such_a_repository_with_a_sentence(api, settings, url):
    settings.GIT_ALLOWED_HOSTS = ["127.0.0.1"]
    answer = api.post("/api/sessions/", {"repository": {"url": url}}, format="json")
    assert answer.status_code == 400, answer.json()
    error = answer.json()["error"]
    assert error["type"] == "ValidationError"
    assert error["message"].startswith("repository.url: The ssh user name in the URL must be")
    assert not Session.objects.exists()
