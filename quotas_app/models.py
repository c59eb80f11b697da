from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

BLANK_HELP = "Blank: not set here. 0: unlimited."


class Quota(models.Model):
    """Limits of one Django group, or of one user (an override that wins over their groups').
    Each limit: blank (NULL) = not set here, the next level decides; 0 = unlimited, said
    explicitly; N = at most N. ``limits.effective`` resolves them."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="quota",
    )
    group = models.OneToOneField(
        "auth.Group", null=True, blank=True, on_delete=models.CASCADE, related_name="quota"
    )
    runs_per_minute = models.PositiveIntegerField(
        null=True, blank=True, help_text=f"Runs admitted in any 60 seconds. {BLANK_HELP}"
    )
    tokens_per_day = models.PositiveBigIntegerField(
        null=True,
        blank=True,
        help_text=f"Input + output tokens per UTC day. {BLANK_HELP}",
    )
    cost_per_month = models.DecimalField(
        "cost per month (USD)",
        max_digits=12,
        decimal_places=4,
        null=True,
        blank=True,
        help_text=f"US dollars of model calls per UTC calendar month. {BLANK_HELP}",
    )
    concurrent_runs = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text=f"Runs not yet ended (pending, running, waiting for approval). {BLANK_HELP}",
    )
    sessions = models.PositiveIntegerField(
        null=True, blank=True, help_text=f"Sessions held at once. {BLANK_HELP}"
    )
    worktree_bytes = models.PositiveBigIntegerField(
        null=True, blank=True, help_text=f"Bytes of one session's files. {BLANK_HELP}"
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=False, group__isnull=True)
                | Q(user__isnull=True, group__isnull=False),
                name="quota_of_a_user_or_a_group",
            )
        ]

    def __str__(self) -> str:
        return f"quota of {self.user or self.group}"


class UsageRecord(models.Model):
    """One model call: what it used and cost. Ids, not foreign keys, for the session, run and
    message: a deleted session's spending stays on record."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    session_id = models.CharField(max_length=40)
    run_id = models.CharField(max_length=40, blank=True, default="")
    message_id = models.CharField(max_length=40, blank=True, default="")
    model = models.CharField(max_length=200, blank=True, default="")
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cached_input_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=8, default=0)
    created_at = models.DateTimeField()

    class Meta:
        # Per user (budgets, the usage API); by time alone for the admin's all-user dashboard.
        indexes = [models.Index(fields=["user", "created_at"]), models.Index(fields=["created_at"])]

    def __str__(self) -> str:
        return f"{self.model} call of {self.session_id}: {self.input_tokens}+{self.output_tokens}"


class UsageCounter(models.Model):
    """A user's sums over one UTC day or calendar month, bumped in the transaction that writes
    the calls' records: a budget check reads one row, whatever the history holds."""

    class Period(models.TextChoices):
        DAY = "day"
        MONTH = "month"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    period = models.CharField(max_length=8, choices=Period.choices)
    start = models.DateField()
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cached_input_tokens = models.PositiveBigIntegerField(default=0)
    cost_usd = models.DecimalField(max_digits=18, decimal_places=8, default=0)
    calls = models.PositiveBigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["user", "period", "start"], name="one_counter_per_user_period"
            )
        ]

    def __str__(self) -> str:
        return f"{self.period} {self.start} of user {self.user_id}"

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


class RunAdmission(models.Model):
    """When a run of ``user`` was admitted, kept for the sliding minute of
    ``runs_per_minute`` (older rows are pruned as new ones come)."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    run_id = models.CharField(max_length=40)
    created_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["user", "created_at"])]

    def __str__(self) -> str:
        return f"run {self.run_id} admitted at {self.created_at}"
