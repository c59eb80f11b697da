"""Quotas and usage (issue 18): per-user and per-group limits, one usage row per model call,
and the counters that make a check O(1) whatever the history's size.

Where it sits: ``runs_app`` → ``quotas_app`` and ``sessions_app.services`` → ``quotas_app``;
``quotas_app`` imports nothing of the project but the shared error vocabulary
(``core.errors``), so both apps can ask it without a cycle. What it cannot know
(how many runs are in progress, how many sessions a user holds) its callers count and pass.
"""
