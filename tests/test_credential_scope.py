"""Security round 4, finding 8 (issue 42): a saved credential goes to its own scheme, host and
port only — a token saved for a host is never sent to another port of it (another server, maybe
another owner's), nor to an ssh URL; those saved before ports were recorded are for their
kind's default port."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.test import Client

from core.errors import InvalidInput
from sessions_app import vault
from sessions_app.models import Credential, Session
from sessions_app.repositories.credentials import save_credential, secret_for
from workspace import repos

from .support.git_server import (  # noqa: F401
    GitServer,
    git_server_fixture,
    reachable_server_fixture,
)
from .test_repositories import FILES, _clone, _port

pytestmark = pytest.mark.django_db(transaction=True)


def _token(api, server: GitServer, **fields) -> dict:  # noqa: ANN001, ANN003
    answer = api.post(
        "/api/credentials/",
        {"name": f"t{Credential.objects.count()}", "host": "127.0.0.1", "kind": "token",
         "secret": server.token, **fields},
        format="json",
    )  # fmt: skip
    assert answer.status_code == 201, answer.json()
    return answer.json()


def _remote(url: str) -> repos.Remote:
    scheme, rest = url.split("://", 1)
    host, _, port = rest.split("/", 1)[0].rpartition("@")[2].partition(":")
    return repos.Remote(url, scheme, host, int(port or repos.SCHEMES[scheme]), ("93.184.216.34",))


def test_it_sends_a_credential_to_its_own_scheme_host_and_port_only(owner):
    def save(kind: str, port: int | None = None) -> Credential:
        return save_credential(
            owner=owner, name=kind, host="git.example.com", kind=kind, secret="s", port=port
        )

    token, key = save("token"), save("ssh_key")
    assert (token.port, key.port) == (443, 22)
    on_8443 = save("token", port=8443)
    for credential, url in [
        (token, "https://git.example.com/x.git"),
        (token, "https://git.example.com:443/x.git"),
        (on_8443, "https://git.example.com:8443/x.git"),
        (key, "ssh://git@git.example.com/x.git"),
    ]:
        assert secret_for(owner.pk, credential.id, _remote(url)).value == "s", url
    for credential, url, words in [
        (token, "https://git.example.com:8443/x.git", "is for https://git.example.com:443, not"),
        (on_8443, "https://git.example.com/x.git", "own host and port"),
        (key, "ssh://git@git.example.com:2222/x.git", "is for ssh://git.example.com:22, not"),
        (token, "ssh://git@git.example.com:443/x.git", "An access token is for https://"),
        (key, "https://git.example.com:22/x.git", "An ssh key is for ssh://"),
    ]:
        with pytest.raises(InvalidInput, match=words):
            secret_for(owner.pk, credential.id, _remote(url))


def test_a_credential_for_another_port_of_the_host_is_refused_with_a_sentence(api, server):
    url = server.make_repo("ported", FILES, private=True)
    default = _token(api, server)  # for port 443
    elsewhere = _token(api, server, port=_port(server) + 1)
    for credential in (default, elsewhere):
        answer = api.post(
            "/api/sessions/",
            {"repository": {"url": url, "credential_id": credential["id"]}},
            format="json",
        )
        assert answer.status_code == 400, answer.json()
        error = answer.json()["error"]
        assert error["type"] == "ValidationError"
        assert f"not https://127.0.0.1:{_port(server)}" in error["message"]
        assert "only ever sent to its own host and port" in error["message"]
    assert not Session.objects.exists()
    assert default["port"] == 443
    own = _token(api, server, port=_port(server))
    session = _clone(api, url, credential_id=own["id"])
    assert session["source"]["commit"] == server.head("ported", "main")
    # A push with another port's credential is refused the same way, before git runs.
    pushed = api.post(
        f"/api/sessions/{session['id']}/push/",
        {"branch": "agent/x", "credential_id": elsewhere["id"]},
        format="json",
    )
    assert pushed.status_code == 400, pushed.json()
    assert "own host and port" in pushed.json()["error"]["message"]
    assert server.head("ported", "agent/x") is None


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"port": 0}, "port must be a whole number from 1 to 65535."),
        ({"port": 65536}, "port must be a whole number from 1 to 65535."),
        ({"port": "https"}, "port must be a whole number from 1 to 65535."),
        ({"port": True}, "port must be a whole number from 1 to 65535."),
        ({"host": "git.example.com:8443"}, "host must be a host name such as github.com"),
    ],
)
def test_a_credentials_port_is_checked_when_it_is_saved(api, fields, words):
    body = {"name": "x", "host": "git.example.com", "kind": "token", "secret": "s", **fields}
    answer = api.post("/api/credentials/", body, format="json")
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"]["type"] == "ValidationError"
    assert words in answer.json()["error"]["message"]
    assert not Credential.objects.exists()


def test_the_credentials_page_saves_and_shows_the_port(owner):
    browser = Client()
    browser.force_login(owner)
    body = {"name": "x", "host": "git.example.com", "kind": "ssh_key", "secret": "s"}
    assert browser.post("/credentials/", {**body, "port": ""}).status_code == 302
    assert browser.post("/credentials/", {**body, "port": "2222"}).status_code == 302
    assert sorted(Credential.objects.values_list("port", flat=True)) == [22, 2222]
    html = browser.get("/credentials/").content.decode()
    assert "git.example.com:22<" in html and "git.example.com:2222<" in html
    refused = browser.post("/credentials/", {**body, "port": "99999"})
    assert refused.status_code == 400
    assert "port must be a whole number" in refused.content.decode()


def test_credentials_saved_before_ports_are_for_their_kinds_default_port(owner):
    executor = MigrationExecutor(connection)
    before = [("sessions_app", "0013_lineage_kind")]
    executor.migrate(before)
    old = executor.loader.project_state(before).apps.get_model("sessions_app", "Credential")
    for kind in ("token", "ssh_key"):
        old.objects.create(
            id=f"crd_{kind}", owner_id=owner.pk, name=kind, host="h.example", kind=kind,
            secret=vault.seal("s"),
        )  # fmt: skip
    call_command("migrate", verbosity=0)
    ports = dict(Credential.objects.values_list("kind", "port"))
    assert ports == {"token": 443, "ssh_key": 22}
