"""Settings of the agent (docs/configuration.md, "Models"): the models and their providers,
the shell tool and its sandbox, the tool permissions, context compaction and the scripted
model. Imported whole by config/settings.py."""

from __future__ import annotations

import os

from config.environment import env_bool

AGENT_MODEL = os.environ.get("AGENT_MODEL", "scripted")
# The models sessions may pick (core/models_catalog.py): JSON list of
# {"name", "context_window", "price": {"input", "output", "cached_input"}} (USD per 1M tokens).
AGENT_MODELS = os.environ.get("AGENT_MODELS", "")
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "") or None
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "") or "not-needed"
# anthropic:<model>: Anthropic's Messages API (unset base URL: the SDK's default).
ANTHROPIC_BASE_URL = os.environ.get("ANTHROPIC_BASE_URL", "") or None
ANTHROPIC_API_KEY = os.environ.get("ANTHROPIC_API_KEY", "") or "not-set"
ANTHROPIC_MAX_TOKENS = int(os.environ.get("ANTHROPIC_MAX_TOKENS", "8192"))
# Extended thinking's budget in tokens (0: off); streamed as reasoning parts.
ANTHROPIC_THINKING_TOKENS = int(os.environ.get("ANTHROPIC_THINKING_TOKENS", "0"))
AGENT_ALLOW_SHELL = env_bool("AGENT_ALLOW_SHELL", False)
# The shell tool runs in a bubblewrap sandbox (workspace/sandbox.py); "off" (the operator's
# choice, for a machine where every user is trusted) runs it unconfined, with the limits only.
AGENT_SHELL_SANDBOX = os.environ.get("AGENT_SHELL_SANDBOX", "bwrap").strip().lower()
AGENT_SHELL_NETWORK = env_bool("AGENT_SHELL_NETWORK", False)
# Each shell command writes into an overlay layer of its own, merged into the worktree by
# renames when it ends (workspace/layers.py). "auto": where this host can mount one (said once
# in the log, in /healthz and the admin where it cannot); "off": the command writes into the
# worktree itself, with an undo point taken before it.
AGENT_SHELL_OVERLAY = os.environ.get("AGENT_SHELL_OVERLAY", "auto").strip().lower()
AGENT_SHELL_TIMEOUT = float(os.environ.get("AGENT_SHELL_TIMEOUT", "120"))
AGENT_SHELL_MEMORY_BYTES = int(os.environ.get("AGENT_SHELL_MEMORY_BYTES", str(1024**3)))
AGENT_SHELL_PROCESSES = int(os.environ.get("AGENT_SHELL_PROCESSES", "128"))
AGENT_SHELL_OUTPUT_MAX = int(os.environ.get("AGENT_SHELL_OUTPUT_MAX", "65536"))
AGENT_SHELL_TMP_BYTES = int(os.environ.get("AGENT_SHELL_TMP_BYTES", str(64 * 1024**2)))
# Tool permissions (docs/semantics.md §8.1): the deployment's defaults, JSON of
# {"<tool>": "allow"|"ask"|"deny" | {"<pattern>": rule, ...}}; unset = every tool allowed.
AGENT_PERMISSIONS = os.environ.get("AGENT_PERMISSIONS", "")
# Context compaction (docs/semantics.md §10): before a model call whose transcript would pass
# context window × AGENT_COMPACT_AT (tokens, estimated as characters / 4), older turns are
# summarised. The scripted model's window is SCRIPTED_CONTEXT_WINDOW; other models'
# AGENT_CONTEXT_WINDOW.
AGENT_COMPACT_AT = float(os.environ.get("AGENT_COMPACT_AT", "0.8"))
SCRIPTED_CONTEXT_WINDOW = int(os.environ.get("SCRIPTED_CONTEXT_WINDOW", "128000"))
AGENT_CONTEXT_WINDOW = int(os.environ.get("AGENT_CONTEXT_WINDOW", "128000"))
# A model call refused for its rate (HTTP 429/529) is tried again this many times, after the
# provider's Retry-After (or 1, 2, 4… s), waiting at most AGENT_RATE_LIMIT_MAX_WAIT s a time.
AGENT_RATE_LIMIT_RETRIES = int(os.environ.get("AGENT_RATE_LIMIT_RETRIES", "3"))
AGENT_RATE_LIMIT_MAX_WAIT = float(os.environ.get("AGENT_RATE_LIMIT_MAX_WAIT", "60"))
SCRIPTED_DEFAULT_PACE_MS = float(os.environ.get("SCRIPTED_DEFAULT_PACE_MS", "15"))
