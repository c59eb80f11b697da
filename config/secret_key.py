"""``SECRET_KEY``: the environment's, or in embedded mode (and with DEBUG) one made on the
first start and kept in a file; a missing, short or published key stops the process
(tests/test_security_settings.py)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from config.environment import BASE_DIR

# Keys that were published (this project's old default, its env.example placeholder, Django's
# startproject keys) sign nothing in production: sessions, CSRF tokens and password-reset
# links could be forged by anyone who read them.
_PUBLISHED_SECRET_KEYS = {"dev-insecure-key-change-me-in-production", "change-me"}
_SECRET_KEY_MIN_LENGTH = 32
_SECRET_KEY_HELP = (
    "set SECRET_KEY to a random string of 50 characters, e.g. the output of "
    "`python3 -c 'import secrets; print(secrets.token_urlsafe(50))'`"
)


def _secret_key_problem(key: str, source: str) -> str | None:
    if not key:
        return f"{source} is not set"
    if key in _PUBLISHED_SECRET_KEYS or key.startswith("django-insecure"):
        return f"{source} is a published default key"
    if len(key) < _SECRET_KEY_MIN_LENGTH:
        return f"{source} is too short ({len(key)} characters, at least {_SECRET_KEY_MIN_LENGTH})"
    return None


def _stored_secret_key(path: Path) -> str:
    """A key made once, on the first start, and kept in ``path`` (mode 0600): embedded mode
    works on a fresh machine with no configuration, and its logins survive restarts."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.unlink(missing_ok=True)  # left by a start that died here; O_EXCL makes a new one
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50) + "\n")
        try:
            # A link never replaces a file: processes started together all keep the first key.
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


def secret_key(*, debug: bool, embedded: bool) -> str:
    key, source = os.environ.get("SECRET_KEY", ""), "SECRET_KEY"
    if not key and (embedded or debug):
        path = Path(os.environ.get("SECRET_KEY_FILE", "") or BASE_DIR / "var/secret_key")
        key, source = _stored_secret_key(path), str(path)
    problem = _secret_key_problem(key, source)
    if problem and not debug:
        raise ImproperlyConfigured(f"{problem}: {_SECRET_KEY_HELP}.")
    return key
