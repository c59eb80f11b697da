"""The user's saved git credentials (docs/semantics.md §13): an access token or an ssh key, sealed
in the vault, and the secret one gives for a remote — only ever sent to its own host and port, a
token over https and a key over ssh."""

from __future__ import annotations

from django.conf import settings

from core.errors import InvalidInput, NotFoundError
from workspace import repos

from .. import vault
from ..models import Credential


def credential_data(credential: Credential) -> dict:
    return {
        "id": credential.id,
        "name": credential.name,
        "host": credential.host,
        "port": credential.port,
        "kind": credential.kind,
        "created_at": credential.created_at.isoformat().replace("+00:00", "Z"),
    }


def save_credential(
    *,
    owner,  # noqa: ANN001
    name: str,
    host: str,
    kind: str,
    secret: str,
    port: int | None = None,
) -> Credential:
    """A new credential of ``owner`` (its shape checked by the API's serializer), for ``host``
    at ``port`` (none: its kind's default, 443 for a token, 22 for an ssh key)."""
    if owner.git_credentials.count() >= settings.CREDENTIALS_PER_USER_MAX:
        raise InvalidInput(
            f"You have {settings.CREDENTIALS_PER_USER_MAX} saved credentials already: delete "
            "one first."
        )
    return Credential.objects.create(
        owner=owner,
        name=name,
        host=host.lower(),
        port=port or Credential.DEFAULT_PORTS[kind],
        kind=kind,
        secret=vault.seal(secret),
    )


def credentials_of(owner) -> list[dict]:  # noqa: ANN001
    rows = Credential.objects.filter(owner=owner)[: settings.CREDENTIALS_PER_USER_MAX]
    return [credential_data(c) for c in rows]


def delete_credential(*, owner, credential_id: str) -> None:  # noqa: ANN001
    """Delete one of ``owner``'s credentials; sessions that named it push and clone without
    it from then on (their ``source`` keeps only its id)."""
    deleted, _ = Credential.objects.filter(owner=owner, id=credential_id).delete()
    if not deleted:
        raise NotFoundError("No such credential.")


def secret_for(owner_id: int, credential_id: str | None, remote: repos.Remote):
    """The secret ``credential_id`` (one of ``owner_id``'s) gives for ``remote``, or None
    without one: refused when the credential is for another scheme, host or port."""
    if not credential_id:
        return None
    credential = Credential.objects.filter(id=credential_id, owner_id=owner_id).first()
    if credential is None:
        raise NotFoundError("No such credential.")
    if credential.kind == Credential.Kind.SSH_KEY and remote.scheme != "ssh":
        raise InvalidInput("An ssh key is for ssh:// URLs; use an access token for https.")
    if credential.kind == Credential.Kind.TOKEN and remote.scheme != "https":
        raise InvalidInput("An access token is for https:// URLs.")
    if (credential.host, credential.port) != (remote.host, remote.port):
        raise InvalidInput(
            f"The credential {credential.name!r} is for {credential.address}, not "
            f"{remote.scheme}://{remote.host}:{remote.port}: a credential is only ever sent "
            "to its own host and port."
        )
    try:
        return repos.Secret(credential.kind, vault.unseal(credential.secret))
    except vault.SecretUnreadable as exc:
        raise InvalidInput(str(exc)) from None
