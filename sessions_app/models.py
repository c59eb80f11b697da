from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models
from django.utils import timezone

from core import ids


class Session(models.Model):
    class Status(models.TextChoices):
        IDLE = "idle"
        BUSY = "busy"
        WAITING = "waiting"  # its run waits for the owner to approve a tool call
        # Its worktree is being filled (a clone): a job holds the busy lock (``repos``).
        PREPARING = "preparing"

    class Checkpoint(models.TextChoices):
        RUNS = "runs"
        TOOL_BATCH = "tool-batch"
        TOOL = "tool"

    id = models.CharField(primary_key=True, max_length=40, default=ids.session_id, editable=False)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="agent_sessions"
    )
    title = models.CharField(max_length=200, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    system_prompt = models.TextField(blank=True, default="")
    checkpoint = models.CharField(
        max_length=16, choices=Checkpoint.choices, default=Checkpoint.TOOL_BATCH
    )
    head = models.ForeignKey(
        "sessions_app.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The busy lock: a run id plus a lease. Taken with a conditional UPDATE (see services/lock).
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.IDLE)
    busy_run_id = models.CharField(max_length=40, null=True, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    revert = models.JSONField(null=True, blank=True)
    # Tool permissions of this session (sessions_app/permissions.py), over the deployment's.
    permissions = models.JSONField(default=dict, blank=True)
    summary = models.JSONField(default=dict, blank=True)
    # Tokens and cost of every model call of the session's runs, summed as each run ends.
    usage = models.JSONField(default=dict, blank=True)
    # Rough size, in tokens, of the active path (recomputed by rollback).
    context_tokens = models.PositiveIntegerField(default=0)
    forked_from_session = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_from_message_id = models.CharField(max_length=40, null=True, blank=True)
    # What kind of fork it is: "" (a fork, or not one), "alternative" (one of N runs of the same
    # input, docs/semantics.md §14.3), with the group the N share.
    lineage_kind = models.CharField(max_length=16, blank=True, default="")
    alternative_group = models.CharField(max_length=40, blank=True, default="", db_index=True)
    # Where the worktree's first files came from: {} (empty), or {"type": "git", "url", "ref",
    # "depth", "commit", "credential_id", "error"?} or {"type": "upload", "name", "files"}, or
    # {"type": "share"} / {"type": "admin"} for another user's copy (its origin stays theirs).
    source = models.JSONField(default=dict, blank=True)
    # Its home host's name (``Host``, sessions_app/hosts.py): its runs and clone go to that
    # host's queue. Blank: any host (sessions from before hosts, or none was live).
    host = models.CharField(max_length=100, blank=True, default="")
    # What the central store (``SNAPSHOT_REMOTE``, sessions_app/replicas.py) last received:
    # the commit its ref names, the snapshot it wraps, when. Blank: nothing yet (or off).
    replicated_commit = models.CharField(max_length=64, blank=True, default="")
    replicated_snapshot = models.CharField(max_length=64, blank=True, default="")
    replicated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["owner", "-id"]), models.Index(fields=["host"])]

    def __str__(self) -> str:
        return f"{self.id} {self.title}".strip()

    @property
    def worktree(self) -> Path:
        return Path(settings.WORKSPACE_ROOT) / self.id

    @property
    def snapshot_dir(self) -> Path:
        return Path(settings.WORKSPACE_ROOT) / ".snapshots" / f"{self.id}.git"


class Message(models.Model):
    class Role(models.TextChoices):
        USER = "user"
        ASSISTANT = "assistant"

    id = models.CharField(primary_key=True, max_length=40, default=ids.message_id, editable=False)
    # Indexed by the (session, id) index below.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    run_id = models.CharField(max_length=40, null=True, blank=True, db_index=True)
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="children"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    created_at = models.DateTimeField(default=timezone.now)
    completed_at = models.DateTimeField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True, default="")
    tokens = models.JSONField(default=dict, blank=True)
    structured = models.JSONField(null=True, blank=True)
    # Replaced by a regenerate (replace_original): kept, but left out of branch listings.
    hidden = models.BooleanField(default=False)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["session", "id"])]

    def __str__(self) -> str:
        return f"{self.id} ({self.role})"


class Part(models.Model):
    class Type(models.TextChoices):
        TEXT = "text"
        REASONING = "reasoning"
        TOOL = "tool"
        STEP_START = "step-start"
        STEP_FINISH = "step-finish"
        PATCH = "patch"
        FILE = "file"
        # A summary that replaces the path's first ``data.replaced`` messages for the model
        # (docs/semantics.md §10); the messages themselves stay.
        COMPACTION = "compaction"
        # A change taken from another step, turn or fork onto the head (docs/semantics.md §14.2):
        # ``data`` names the source and the files.
        APPLIED = "applied"

    id = models.CharField(primary_key=True, max_length=40, default=ids.part_id, editable=False)
    # Indexed by the (message, order) index below.
    message = models.ForeignKey(
        Message, on_delete=models.CASCADE, related_name="parts", db_index=False
    )
    # The message's session, kept on the part so a session's parts are one index away. No
    # database constraint: the message's own is enough, and a fork then checks one key per
    # copied part instead of two.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, related_name="+", db_constraint=False
    )
    order = models.PositiveIntegerField(default=0)
    type = models.CharField(max_length=16, choices=Type.choices)
    text = models.TextField(blank=True, default="")
    call_id = models.CharField(max_length=100, blank=True, default="")
    tool = models.CharField(max_length=100, blank=True, default="")
    state = models.JSONField(null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["message_id", "order"]
        indexes = [models.Index(fields=["message", "order"])]

    def __str__(self) -> str:
        return f"{self.id} {self.type}"


class HistoryEvent(models.Model):
    """Append-only audit of history moves. Nothing a rollback hides is ever deleted."""

    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="history")
    kind = models.CharField(max_length=32)
    run_id = models.CharField(max_length=40, null=True, blank=True)
    data = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"{self.session_id} {self.kind}"


class Share(models.Model):
    token = models.CharField(primary_key=True, max_length=64, default=ids.share_token)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="shares")
    # The pinned message; null pins the empty conversation. No constraint and no action on
    # delete: when a cleanup deletes the pinned message the id stays, and the link answers
    # 404 (docs/semantics.md §6.3) instead of turning into an empty pin that a fork would read as
    # "the head".
    message = models.ForeignKey(
        Message,
        null=True,
        blank=True,
        on_delete=models.DO_NOTHING,
        db_constraint=False,
        related_name="+",
    )
    snapshot = models.CharField(max_length=64, blank=True, default="")
    # The owner's system prompt goes with the link only when they say so (docs/semantics.md §6.4).
    include_system_prompt = models.BooleanField(default=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE)
    created_at = models.DateTimeField(auto_now_add=True)
    # When the pin last moved (sharing again moves it to the head of then).
    pinned_at = models.DateTimeField(default=timezone.now)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"share of {self.session_id}"


class Credential(models.Model):
    """A user's secret for their private repositories (an access token or an ssh deploy
    key), stored encrypted (``sessions_app.secrets``). The secret is never shown back."""

    class Kind(models.TextChoices):
        TOKEN = "token"
        SSH_KEY = "ssh_key"

    id = models.CharField(
        primary_key=True, max_length=40, default=ids.credential_id, editable=False
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="git_credentials"
    )
    name = models.CharField(max_length=100)
    # Where it may be sent: the scheme its kind says (a token over https, a key over ssh), this
    # host and this port, never another port of the host (another server, maybe another owner).
    host = models.CharField(max_length=255)
    port = models.PositiveIntegerField()
    kind = models.CharField(max_length=8, choices=Kind.choices)
    secret = models.BinaryField()  # a Fernet token of the secret
    created_at = models.DateTimeField(auto_now_add=True)

    DEFAULT_PORTS = {Kind.TOKEN: 443, Kind.SSH_KEY: 22}

    class Meta:
        ordering = ["-created_at"]
        indexes = [models.Index(fields=["owner", "-created_at"])]

    def __str__(self) -> str:
        return f"{self.name} ({self.kind}, {self.address})"

    @property
    def scheme(self) -> str:
        return "ssh" if self.kind == self.Kind.SSH_KEY else "https"

    @property
    def address(self) -> str:
        """Where it is sent, as a URL starts: ``https://git.example.com:443``."""
        return f"{self.scheme}://{self.host}:{self.port}"


class Host(models.Model):
    """A worker host (``WORKER_HOST``): the processes of that name beat here every half lease
    (sessions_app/hosts.py); live while the last beat is within ``RUN_LEASE_SECONDS``. New
    sessions are placed on live hosts. The rest is for the admin: the last process that beat,
    and the disk of its ``WORKSPACE_ROOT``."""

    name = models.CharField(primary_key=True, max_length=100)
    started_at = models.DateTimeField(default=timezone.now)
    last_heartbeat = models.DateTimeField(default=timezone.now)
    version = models.CharField(max_length=40, blank=True, default="")
    pid = models.PositiveIntegerField(default=0)
    workspace_root = models.CharField(max_length=500, blank=True, default="")
    disk_total = models.BigIntegerField(default=0)
    disk_free = models.BigIntegerField(default=0)
    # ``manage.py drain_host``: no new session is placed here (sessions_app/rehome.py).
    draining = models.BooleanField(default=False)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name
