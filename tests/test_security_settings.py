"""Deployment security (issue 12, item 11): a Content-Security-Policy on every answer and no
inline script or style for it to block; ``HTTPS=true`` makes cookies secure, sends HSTS and
redirects to https; a missing, short or published SECRET_KEY stops the process — except in
embedded mode, which makes its own key once. Settings are read at import time, so those checks
run ``django.setup()`` in a subprocess with a crafted environment."""

from __future__ import annotations

import json
import os
import re
import secrets
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from django.test import Client

ROOT = Path(__file__).resolve().parents[1]
GOOD_KEY = secrets.token_urlsafe(50)
SERVICES = {
    "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/agentplat-never-connected",
    "REDIS_URL": "redis://127.0.0.1:6379/15",
}
CSP = {
    "default-src": "'self'",
    "script-src": "'self'",
    "style-src": "'self'",
    "img-src": "'self' data:",
    "connect-src": "'self'",
    "object-src": "'none'",
    "base-uri": "'self'",
    "frame-ancestors": "'none'",
    "form-action": "'self'",
}
# The environment that decides what is checked here; the rest of the test's is kept.
DECIDING = (
    "SECRET_KEY",
    "SECRET_KEY_FILE",
    "DEBUG",
    "DATABASE_URL",
    "REDIS_URL",
    "HTTPS",
    "HTTPS_REDIRECT",
    "HSTS_SECONDS",
    "ALLOWED_HOSTS",
)


def django_in(tmp_path: Path, code: str = "", **env: str) -> subprocess.CompletedProcess:
    """``django.setup()`` in a fresh interpreter with ``env`` as the deciding environment,
    then ``code`` (which may print); embedded mode's database file goes to ``tmp_path``."""
    full = {k: v for k, v in os.environ.items() if k not in DECIDING and "PYTEST" not in k}
    full.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        DATABASE_URL=f"sqlite:///{tmp_path}/db.sqlite3",
        SECRET_KEY_FILE=str(tmp_path / "var/secret_key"),
    )
    full.update(env)
    script = "import django\ndjango.setup()\nfrom django.conf import settings\n" + code
    return subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env=full,
        capture_output=True,
        text=True,
        timeout=120,
    )


def policy(header: str) -> dict[str, str]:
    parts = (p.strip().split(None, 1) for p in header.split(";") if p.strip())
    return {p[0]: p[1] if len(p) > 1 else "" for p in parts}


# -- SECRET_KEY ----------------------------------------------------------------------------


def test_services_mode_does_not_start_without_a_key(tmp_path):
    proc = django_in(tmp_path, **SERVICES)
    assert proc.returncode != 0
    assert "ImproperlyConfigured: SECRET_KEY is not set: set SECRET_KEY to a random" in proc.stderr


@pytest.mark.parametrize(
    "key, problem",
    [
        ("dev-insecure-key-change-me-in-production", "a published default key"),
        ("django-insecure-" + "x" * 50, "a published default key"),
        ("change-me", "a published default key"),
        ("a-short-but-private-key-0123456", "too short (31 characters, at least 32)"),
    ],
)
@pytest.mark.parametrize("mode", ["services", "embedded"])
def test_a_weak_key_stops_the_process(tmp_path, key, problem, mode):
    env = SERVICES if mode == "services" else {}
    proc = django_in(tmp_path, SECRET_KEY=key, **env)
    assert proc.returncode != 0
    assert f"ImproperlyConfigured: SECRET_KEY is {problem}" in proc.stderr, proc.stderr


def test_a_good_key_is_used(tmp_path):
    proc = django_in(tmp_path, "print(settings.SECRET_KEY)", SECRET_KEY=GOOD_KEY, **SERVICES)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == GOOD_KEY
    assert not (tmp_path / "var/secret_key").exists()


def test_debug_accepts_a_development_key(tmp_path):
    proc = django_in(tmp_path, "print(settings.SECRET_KEY)", SECRET_KEY="dev", DEBUG="true")
    assert proc.returncode == 0, proc.stderr


def test_embedded_mode_makes_its_key_once_and_keeps_it(tmp_path):
    first = django_in(tmp_path, "print(settings.SECRET_KEY)")
    assert first.returncode == 0, first.stderr
    stored = tmp_path / "var/secret_key"
    key = stored.read_text().strip()
    assert first.stdout.strip() == key and len(key) >= 50
    assert stat.S_IMODE(stored.stat().st_mode) == 0o600
    again = django_in(tmp_path, "print(settings.SECRET_KEY)")
    assert again.stdout.strip() == key, "the same key on the next start"
    assert [p.name for p in stored.parent.iterdir()] == ["secret_key"], "no temporary file left"


def test_embedded_mode_key_file_is_not_committed():
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", "var/secret_key"], cwd=ROOT, capture_output=True
    )
    assert ignored.returncode == 0, "var/ must stay in .gitignore"


# -- HTTPS -----------------------------------------------------------------------------------

REQUESTS = """
import json
from django.test import Client
c = Client()
plain = c.get("/login/")
secure = c.get("/login/", HTTP_X_FORWARDED_PROTO="https")
health = c.get("/api/health/")
print(json.dumps({
    "session_secure": settings.SESSION_COOKIE_SECURE,
    "csrf_secure": settings.CSRF_COOKIE_SECURE,
    "proxy_header": settings.SECURE_PROXY_SSL_HEADER,
    "https": settings.HTTPS,
    "plain": [plain.status_code, plain.get("Location", "")],
    "health": health.status_code,
    "secure": secure.status_code,
    "hsts": secure.get("Strict-Transport-Security", ""),
    "csrf_cookie_secure": bool(secure.cookies["csrftoken"]["secure"]),
    "nosniff": secure.get("X-Content-Type-Options", ""),
    "referrer": secure.get("Referrer-Policy", ""),
}))
"""


def https_run(tmp_path: Path, **env: str) -> dict:
    proc = django_in(tmp_path, REQUESTS, SECRET_KEY=GOOD_KEY, **env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_https_makes_cookies_secure_sends_hsts_and_redirects(tmp_path):
    got = https_run(tmp_path, HTTPS="true")
    assert got["https"] is True
    assert got["session_secure"] and got["csrf_secure"] and got["csrf_cookie_secure"]
    assert got["proxy_header"] == ["HTTP_X_FORWARDED_PROTO", "https"]
    assert got["plain"] == [301, "https://testserver/login/"]
    assert got["health"] != 301, "health probes come in plain HTTP from inside"
    assert got["secure"] == 200
    assert got["hsts"] == "max-age=31536000"
    assert got["nosniff"] == "nosniff" and got["referrer"] == "same-origin"


def test_https_redirect_and_hsts_can_be_left_to_the_proxy(tmp_path):
    got = https_run(tmp_path, HTTPS="true", HTTPS_REDIRECT="false", HSTS_SECONDS="0")
    assert got["plain"] == [200, ""] and got["hsts"] == ""
    assert got["session_secure"] and got["csrf_cookie_secure"]


def test_without_https_nothing_is_secure_and_the_proxy_header_is_not_trusted(tmp_path):
    got = https_run(tmp_path)
    assert got["https"] is False
    assert not (got["session_secure"] or got["csrf_secure"] or got["csrf_cookie_secure"])
    assert got["proxy_header"] is None
    assert got["plain"] == [200, ""]
    assert got["hsts"] == "", "a client claiming https gets no HSTS"


def test_the_test_settings_have_no_https(client, settings):
    assert settings.HTTPS is False
    response = client.get("/login/", HTTP_X_FORWARDED_PROTO="https")
    assert response.status_code == 200 and "Strict-Transport-Security" not in response
    assert not response.cookies["csrftoken"]["secure"]


# -- Content-Security-Policy --------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize(
    "url, status",
    [
        ("/login/", 200),
        ("/", 302),
        ("/admin/login/", 200),
        ("/api/docs/", 200),
        ("/api/sessions/", 401),
        ("/api/auth/token/", 405),
        ("/no-such-page/", 404),
    ],
)
def test_every_answer_carries_the_policy(client, url, status):
    response = client.get(url)
    assert response.status_code == status
    assert policy(response["Content-Security-Policy"]) == CSP


@pytest.mark.django_db
def test_the_pages_of_a_logged_in_user_carry_the_policy(owner):
    client = Client()
    client.force_login(owner)
    sid = client.post("/sessions/new/", {"title": "t"})["Location"].rstrip("/").rsplit("/")[-1]
    for url in ("/", f"/sessions/{sid}/", "/admin/"):
        response = client.get(url)
        assert response.status_code in (200, 302), url
        assert policy(response["Content-Security-Policy"]) == CSP, url


INLINE = [
    (re.compile(r"<script\b(?![^>]*\bsrc=)[^>]*>", re.I), "an inline <script>"),
    (re.compile(r"<style\b", re.I), "a <style> element"),
    (re.compile(r"\sstyle\s*=", re.I), "a style= attribute"),
    (re.compile(r"\son[a-z]+\s*=", re.I), "an on…= handler"),
    (re.compile(r"javascript:", re.I), "a javascript: URL"),
]


def test_no_template_of_ours_has_inline_script_or_style():
    found = [
        f"{path.relative_to(ROOT)}: {what}"
        for path in sorted((ROOT / "templates").rglob("*.html"))
        for pattern, what in INLINE
        if pattern.search(path.read_text())
    ]
    assert not found, "the CSP blocks these; move them to static files:\n" + "\n".join(found)


@pytest.mark.django_db
def test_the_api_docs_load_their_script_from_a_url(client):
    page = client.get("/api/docs/").content.decode()
    for pattern, what in INLINE:
        assert not pattern.search(page), what
    src = re.search(r'<script src="([^"]*script=[^"]*)"', page).group(1)
    script = client.get(src.replace("&amp;", "&"))
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()
