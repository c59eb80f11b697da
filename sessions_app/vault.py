"""Secrets at rest: saved repository credentials, encrypted with Fernet (``cryptography``:
AES-128-CBC with an HMAC-SHA256, a timestamp and a version byte; the well-kept recipe, so
nothing here is cryptography of our own).

The keys come from ``CREDENTIALS_KEYS`` (the first encrypts, every one decrypts, so a key
can be rotated in); without it one key is derived from ``SECRET_KEY`` with HKDF, under a
label of its own, so the derived key is not the signing key itself.
"""

from __future__ import annotations

import base64
from functools import cache

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from django.conf import settings


class SecretUnreadable(Exception):
    """A stored secret no configured key opens (the keys changed)."""


@cache
def _box(keys: tuple[str, ...], secret_key: str) -> MultiFernet:
    if not keys:
        derived = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"agentplat credentials v1"
        ).derive(secret_key.encode())
        keys = (base64.urlsafe_b64encode(derived).decode(),)
    return MultiFernet([Fernet(k) for k in keys])


def box() -> MultiFernet:
    return _box(tuple(settings.CREDENTIALS_KEYS), settings.SECRET_KEY)


def seal(secret: str) -> bytes:
    return box().encrypt(secret.encode())


def unseal(token: bytes | memoryview) -> str:
    try:
        return box().decrypt(bytes(token)).decode()
    except InvalidToken:
        raise SecretUnreadable(
            "This credential cannot be read with the server's keys any more: save it again."
        ) from None
