from __future__ import annotations

from django.db import models

from core.ids import new_id


def run_id() -> str:
    return new_id("run")


class Run(models.Model):
    class Mode(models.TextChoices):
        PROMPT = "prompt"
        RESUME = "resume"
        CONTINUE = "continue"
        REGENERATE = "regenerate"
        COMPACT = "compact"  # "Compact now": summarise older turns, nothing else

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        # Stopped before a tool call that waits for the owner's decision; holds the session,
        # no worker (docs/semantics.md §8.2).
        REQUIRES_ACTION = "requires_action"
        COMPLETED = "completed"
        CANCELLED = "cancelled"
        ERROR = "error"

    TERMINAL = {Status.COMPLETED, Status.CANCELLED, Status.ERROR}

    id = models.CharField(primary_key=True, max_length=40, default=run_id, editable=False)
    # Indexed by the (session, status, id) index below.
    session = models.ForeignKey(
        "sessions_app.Session", on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    mode = models.CharField(max_length=16, choices=Mode.choices, default=Mode.PROMPT)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    result = models.CharField(max_length=16, null=True, blank=True)
    input = models.JSONField(default=list, blank=True)
    input_message = models.ForeignKey(
        "sessions_app.Message", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    output_schema = models.JSONField(null=True, blank=True)
    output = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    model = models.CharField(max_length=200, blank=True, default="")
    checkpoint = models.CharField(max_length=16, default="tool-batch")
    multitask_strategy = models.CharField(max_length=16, default="reject")
    max_steps = models.PositiveIntegerField(default=25)
    abort_requested = models.BooleanField(default=False)
    # Set for multitask_strategy interrupt/rollback: the run this one stopped.
    interrupted_run_id = models.CharField(max_length=40, null=True, blank=True)
    forked_from_run = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    forked_from_message_index = models.IntegerField(null=True, blank=True)
    forked_from_session = models.ForeignKey(
        "sessions_app.Session", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Set for continue/regenerate: where the run's branch starts and what it brings (input,
    # files, messages to hide); ``applied`` once the loop has moved the head there.
    branch = models.JSONField(null=True, blank=True)
    # Set on a run that a regenerate with replace_original replaced (hidden from history).
    replaced_by = models.CharField(max_length=40, null=True, blank=True)
    usage = models.JSONField(default=dict, blank=True)
    task_id = models.CharField(max_length=64, blank=True, default="")
    attempts = models.PositiveIntegerField(default=0)
    # The worker host (``WORKER_HOST``) of its last execution: where it began or was taken over.
    host = models.CharField(max_length=100, blank=True, default="")
    # Incremented by every execution's ``lifecycle.begin``: each write of an execution is
    # conditional on the epoch it began under (runs_app/execution/fencing.py).
    lease_epoch = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        "auth.User", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["session", "status", "id"])]

    def __str__(self) -> str:
        return f"{self.id} {self.mode} {self.status}"

    @property
    def is_terminal(self) -> bool:
        return self.status in self.TERMINAL
