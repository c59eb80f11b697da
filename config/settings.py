"""Settings for both modes.

Services mode: DATABASE_URL (PostgreSQL) and REDIS_URL set. Embedded mode: neither set, SQLite
(WAL), the in-memory channel layer and runs executed in-process by the web server.
"""

from __future__ import annotations

import os
import secrets
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def _env_bool(name: str, default: bool = False) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        # A transaction left open by a process that was stopped (SIGSTOP, a VM pause) would
        # hold its row locks until it woke: PostgreSQL ends it after this long instead, so a
        # run taken over by another worker never waits on the one that lost it.
        idle = int(os.environ.get("DB_IDLE_IN_TRANSACTION_SECONDS", "20"))
        if idle > 0 and "options" not in options:
            options["options"] = f"-c idle_in_transaction_session_timeout={idle * 1000}"
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 0,
            "OPTIONS": options,
        }
    if parsed.scheme == "sqlite":
        return _sqlite(Path(unquote(parsed.path)) if parsed.path else BASE_DIR / "var/db.sqlite3")
    raise ValueError(f"Unsupported DATABASE_URL scheme: {parsed.scheme!r}")


def _sqlite(path: Path) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # IMMEDIATE transactions avoid "database is locked" on lock upgrades between the
        # web threads and the in-process run threads; WAL lets readers run beside a writer.
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        "TEST": {"NAME": str(path.with_name(path.stem + "-test.sqlite3"))},
    }


DEBUG = _env_bool("DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not REDIS_URL

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


def _secret_key(*, debug: bool, embedded: bool) -> str:
    key, source = os.environ.get("SECRET_KEY", ""), "SECRET_KEY"
    if not key and (embedded or debug):
        path = Path(os.environ.get("SECRET_KEY_FILE", "") or BASE_DIR / "var/secret_key")
        key, source = _stored_secret_key(path), str(path)
    problem = _secret_key_problem(key, source)
    if problem and not debug:
        raise ImproperlyConfigured(f"{problem}: {_SECRET_KEY_HELP}.")
    return key


SECRET_KEY = _secret_key(debug=DEBUG, embedded=EMBEDDED)

# Services-mode web and worker refuse to start as root unless this is set (config/privileges.py;
# SEMANTICS 11.3): the shipped units and image run them as the `agentplat` user.
ALLOW_ROOT = _env_bool("ALLOW_ROOT", False)

DATABASES = {
    "default": _database_from_url(DATABASE_URL)
    if DATABASE_URL
    else _sqlite(BASE_DIR / "var/db.sqlite3")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "axes",
    "csp",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "sessions_app",
    "runs_app",
    "quotas_app",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Before axes' middleware, so that the lockout page it puts in place gets the policy too.
    "csp.middleware.CSPMiddleware",
    "sessions_app.api.guards.NulGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as axes asks: it turns a login that its backend refused into the 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": f"django.contrib.auth.password_validation.{name}"}
    for name in (
        "UserAttributeSimilarityValidator",
        "MinimumLengthValidator",
        "CommonPasswordValidator",
        "NumericPasswordValidator",
    )
]

# Failed logins (the login form, the admin's, POST /api/auth/token/) are counted per username
# from each client address, and per address: LOGIN_FAILURE_LIMIT failures of one username from
# one address within LOGIN_COOLOFF_MINUTES lock that username from that address only (429)
# until they are that old; LOGIN_ADDRESS_FAILURE_LIMIT failures from one address, across
# usernames, lock the address. No one can lock a person out from another address. A success
# forgets that username's failures from that address. sessions_app/login_throttle.py has the
# details.
AUTHENTICATION_BACKENDS = [
    "sessions_app.login_throttle.LoginThrottleBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_FAILURE_LIMIT = int(os.environ.get("LOGIN_FAILURE_LIMIT", "10"))
AXES_COOLOFF_TIME = timedelta(minutes=float(os.environ.get("LOGIN_COOLOFF_MINUTES", "15")))
LOGIN_ADDRESS_FAILURE_LIMIT = int(os.environ.get("LOGIN_ADDRESS_FAILURE_LIMIT", "50"))
# The pair, and the address alone (its higher limit applied by login_throttle's handler).
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_RESET_ON_SUCCESS = True
# Refused attempts of a locked client do not restart its cool-off: the 429 can say when to
# come back, and a user locked out by someone else's guessing gets in again on time.
AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT = False
AXES_HANDLER = "sessions_app.login_throttle.LoginAttemptsHandler"
AXES_LOCKOUT_CALLABLE = "sessions_app.login_throttle.lockout_response"
AXES_USERNAME_CALLABLE = "sessions_app.login_throttle.client_username"

# Content-Security-Policy: scripts, styles and connections from this origin only — no inline
# script or style anywhere (the templates load static files). 'self' covers ws:/wss: to the
# same host in CSP3 browsers, which the chat's websocket needs (tests/e2e/test_csp.py).
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [SELF],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}

# HTTPS=true: served behind a proxy that terminates TLS and sets X-Forwarded-Proto (only then
# may the header be trusted: without such a proxy any client could claim https).
HTTPS = _env_bool("HTTPS", False)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
# HTTPS_REDIRECT=false where the proxy redirects http to https itself.
SECURE_SSL_REDIRECT = HTTPS and _env_bool("HTTPS_REDIRECT", True)
# Health probes and metrics scrapes come from inside, in plain HTTP, past the proxy.
SECURE_REDIRECT_EXEMPT = [r"^api/health/$", r"^metrics$"]
SECURE_HSTS_SECONDS = int(os.environ.get("HSTS_SECONDS", "31536000" if HTTPS else "0"))
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "var/static"
LOGIN_URL = "/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/login/"

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "rest_framework.authentication.SessionAuthentication",
        "rest_framework.authentication.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["sessions_app.api.guards.StrictJSONParser"],
    "EXCEPTION_HANDLER": "sessions_app.api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent sessions platform API",
    "VERSION": "0.1.0",
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
}

if EMBEDDED:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
else:
    CHANNEL_LAYERS = {
        "default": {
            # The pub/sub layer delivers about 4x the events per second of the core Redis
            # layer on this machine kind (see bench/ and the measurements); ours adds
            # group_send_many, a batch of events in one pipeline (realtime/events.py).
            "BACKEND": "realtime.channel_layer.PipelinedPubSubChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": "agentplat"},
        }
    }

CELERY_BROKER_URL = REDIS_URL or "memory://"
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = False
# Deployments (or test suites) that share one Redis keep their runs apart by queue name.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE", "agentplat")
# A task of a worker that died is delivered again after this many seconds (Redis broker).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "300"))
}

WORKSPACE_ROOT = Path(os.environ.get("WORKSPACE_ROOT", str(BASE_DIR / "var/workspaces")))
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
AGENT_ALLOW_SHELL = _env_bool("AGENT_ALLOW_SHELL", False)
# The shell tool runs in a bubblewrap sandbox (workspace/sandbox.py); "off" (the operator's
# choice, for a machine where every user is trusted) runs it unconfined, with the limits only.
AGENT_SHELL_SANDBOX = os.environ.get("AGENT_SHELL_SANDBOX", "bwrap").strip().lower()
AGENT_SHELL_NETWORK = _env_bool("AGENT_SHELL_NETWORK", False)
AGENT_SHELL_TIMEOUT = float(os.environ.get("AGENT_SHELL_TIMEOUT", "120"))
AGENT_SHELL_MEMORY_BYTES = int(os.environ.get("AGENT_SHELL_MEMORY_BYTES", str(1024**3)))
AGENT_SHELL_PROCESSES = int(os.environ.get("AGENT_SHELL_PROCESSES", "128"))
AGENT_SHELL_OUTPUT_MAX = int(os.environ.get("AGENT_SHELL_OUTPUT_MAX", "65536"))
AGENT_SHELL_TMP_BYTES = int(os.environ.get("AGENT_SHELL_TMP_BYTES", str(64 * 1024**2)))
# Tool permissions (CONTRACT "Permissions and approvals"): the deployment's defaults, JSON of
# {"<tool>": "allow"|"ask"|"deny" | {"<pattern>": rule, ...}}; unset = every tool allowed.
AGENT_PERMISSIONS = os.environ.get("AGENT_PERMISSIONS", "")
# Share links need a login to read by default; true lets anyone with the link read (never
# write; forking always needs a login).
SHARE_ANONYMOUS_READ = _env_bool("SHARE_ANONYMOUS_READ", False)
# Self sign-up at /signup/ (off: users are added in the admin or with manage.py adduser).
ALLOW_SIGNUP = _env_bool("ALLOW_SIGNUP", False)
AGENT_MAX_STEPS = int(os.environ.get("AGENT_MAX_STEPS", "25"))
# Lease of the per-session busy lock; the running loop renews it every third of this.
RUN_LEASE_SECONDS = float(os.environ.get("RUN_LEASE_SECONDS", "30"))
# A run whose lease was not known renewed for this fraction of a lease stops (before the
# lease can lapse and the sweep give the run to another worker).
RUN_LEASE_STOP_FRACTION = float(os.environ.get("RUN_LEASE_STOP_FRACTION", "0.75"))
# Executions of a run in a row that ended without the run ending (its worker crashed or died,
# the lease expired): past this many, the next delivery ends the run in error instead of
# starting it again, so no input makes a run loop between crash and re-enqueue.
RUN_MAX_ATTEMPTS = int(os.environ.get("RUN_MAX_ATTEMPTS", "3"))
# Aborts arrive at once (Redis pub/sub / in-process); the database flag is re-read this often.
RUN_ABORT_POLL_SECONDS = float(os.environ.get("RUN_ABORT_POLL_SECONDS", "1.0"))
# Text deltas of one session are coalesced into frames of at most this many milliseconds,
# while at most STREAM_FRAME_SESSIONS sessions stream from one process; beyond, frames widen
# in proportion (fewer, fuller frames for hundreds of streams), up to STREAM_FRAME_MAX_MS.
STREAM_FRAME_MS = float(os.environ.get("STREAM_FRAME_MS", "25"))
STREAM_FRAME_SESSIONS = float(os.environ.get("STREAM_FRAME_SESSIONS", "50"))
STREAM_FRAME_MAX_MS = float(os.environ.get("STREAM_FRAME_MAX_MS", "150"))
# Streamed text is written to the database at most this often while a step streams.
STREAM_FLUSH_SECONDS = float(os.environ.get("STREAM_FLUSH_SECONDS", "0.5"))
# At most this many parts' streamed text a write (the others at the next tick).
STREAM_FLUSH_BATCH = int(os.environ.get("STREAM_FLUSH_BATCH", "100"))
# Context compaction (SEMANTICS 10): before a model call whose transcript would pass
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
# The run host (runs_app/host.py): every live run of a process is a coroutine on one loop.
# At most RUN_HOST_CAPACITY live runs a process (more wait for room; the broker hands them to
# other workers); RUN_DB_THREADS threads (one database connection each) run their database
# statements and git, RUN_TOOL_THREADS their file tools.
RUN_HOST_CAPACITY = int(os.environ.get("RUN_HOST_CAPACITY", "1000"))
RUN_DB_THREADS = int(os.environ.get("RUN_DB_THREADS", "8"))
RUN_TOOL_THREADS = int(os.environ.get("RUN_TOOL_THREADS", "16"))
# How many runs of a host may be starting at once (begin, the history, the first rows, a
# snapshot): the rest wait their turn, so a burst of new runs leaves the live ones room
# (docs/benchmarks.md, streaming: 4 at once let 500 starting runs hold up the live ones' tokens).
RUN_STARTING_AT_ONCE = int(os.environ.get("RUN_STARTING_AT_ONCE", "2"))
# Requests that wait for their run (``wait: true``; runs_app/waits.py) hold no thread and no
# database connection while they wait: at most RUN_WAITS_PER_USER_MAX of them per user at
# once, across the web processes (past it: 429 TooManyWaits; 0 = no limit). A wait checks its
# run's stored status every RUN_WAIT_RECHECK_SECONDS besides the run's events (one query for
# every wait of a process). RUN_ADMISSIONS_AT_ONCE requests of a web process admit runs (or
# read a waited-for run) at once; the rest take turns, leaving the process's other requests
# a thread, a connection and the interpreter.
RUN_WAITS_PER_USER_MAX = int(os.environ.get("RUN_WAITS_PER_USER_MAX", "50"))
RUN_WAIT_RECHECK_SECONDS = float(os.environ.get("RUN_WAIT_RECHECK_SECONDS", "5"))
RUN_ADMISSIONS_AT_ONCE = int(os.environ.get("RUN_ADMISSIONS_AT_ONCE", "2"))
# Where runs execute: "celery" (services mode) or "thread" (embedded: in-process pool).
RUN_EXECUTOR = os.environ.get("RUN_EXECUTOR", "thread" if EMBEDDED else "celery")

# Every record carries its session_id and run_id; LOG_FORMAT=json writes one object a line.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "core.logs.ContextFilter"}},
    "formatters": {
        "text": {
            "()": "core.logs.TextFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        },
        "json": {"()": "core.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "filters": ["context"],
            "formatter": "json" if os.environ.get("LOG_FORMAT") == "json" else "text",
        }
    },
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "WARNING")},
}
# Prometheus metrics at /metrics (runs_app/metrics.py): unset, the page does not exist (404);
# set, a scrape must send "Authorization: Bearer <METRICS_TOKEN>". PROMETHEUS_MULTIPROC_DIR
# (read by prometheus_client itself) adds up the workers' values with Daphne's.
METRICS_TOKEN = os.environ.get("METRICS_TOKEN", "")
# A run's task is stopped after this long (the soft limit ends the run in "error" first).
RUN_TIME_LIMIT_SECONDS = int(os.environ.get("RUN_TIME_LIMIT_SECONDS", "3600"))
CELERY_TASK_TIME_LIMIT = RUN_TIME_LIMIT_SECONDS + 60
CELERY_TASK_SOFT_TIME_LIMIT = RUN_TIME_LIMIT_SECONDS

# Files larger than this stay out of worktree snapshots (reported in step-finish parts).
SNAPSHOT_MAX_FILE_BYTES = int(os.environ.get("SNAPSHOT_MAX_FILE_BYTES", str(10 * 1024 * 1024)))
# Paths snapshots never keep (gitignore patterns, comma-separated; written to each snapshot git
# dir's info/exclude): what a package manager or an interpreter rebuilds. Listed as "excluded"
# among a step's skipped files. Empty: every file not ignored by the worktree's .gitignore.
SNAPSHOT_EXCLUDE = [
    p.strip()
    for p in os.environ.get(
        "SNAPSHOT_EXCLUDE",
        "node_modules/,.venv/,__pycache__/,.mypy_cache/,.pytest_cache/,.ruff_cache/,.tox/",
    ).split(",")
    if p.strip()
]
# Downloads (archives, patches): an archive reads blobs in batches of at most this many
# bytes, each batch sent before the next is read; a patch past the second bound is refused
# (an archive holds the same files).
DOWNLOAD_BATCH_BYTES = int(os.environ.get("DOWNLOAD_BATCH_BYTES", str(8 * 1024 * 1024)))
DOWNLOAD_PATCH_MAX_BYTES = int(os.environ.get("DOWNLOAD_PATCH_MAX_BYTES", str(64 * 1024 * 1024)))
# Repositories (workspace/repos.py, docs/repositories.md). A clone or an upload past
# REPO_MAX_BYTES (the files checked out, and what git receives) or REPO_MAX_FILES, or still
# going after REPO_CLONE_TIMEOUT seconds, is stopped and leaves nothing behind. A repository
# host that resolves to a loopback, private or link-local address is refused unless
# GIT_ALLOWED_HOSTS (comma-separated "host" or "host:port") names it. GIT_SSL_CAINFO: a CA
# bundle to trust for https clones and pushes (an internal CA); empty: the system's.
REPO_MAX_BYTES = int(os.environ.get("REPO_MAX_BYTES", str(1024 * 1024 * 1024)))
REPO_MAX_FILES = int(os.environ.get("REPO_MAX_FILES", "100000"))
REPO_CLONE_TIMEOUT = float(os.environ.get("REPO_CLONE_TIMEOUT", "600"))
GIT_ALLOWED_HOSTS = [
    h.strip().lower() for h in os.environ.get("GIT_ALLOWED_HOSTS", "").split(",") if h.strip()
]
GIT_SSL_CAINFO = os.environ.get("GIT_SSL_CAINFO", "")
# Saved repository credentials are encrypted with Fernet (``cryptography``). CREDENTIALS_KEYS:
# comma-separated Fernet keys, the first encrypts, all decrypt (rotation); empty: one key
# derived from SECRET_KEY (changing SECRET_KEY then makes saved credentials unreadable).
# A folder dropped on the page is sent as one multipart file per file (Django's own bound on
# the number of files in one request; larger trees go as an archive).
DATA_UPLOAD_MAX_NUMBER_FILES = int(os.environ.get("UPLOAD_MAX_FOLDER_FILES", "10000"))
CREDENTIALS_PER_USER_MAX = int(os.environ.get("CREDENTIALS_PER_USER_MAX", "50"))
CREDENTIALS_KEYS = [
    k.strip() for k in os.environ.get("CREDENTIALS_KEYS", "").split(",") if k.strip()
]
# A git call of the snapshots that has not answered after this long is killed and fails with
# SnapshotError: a hung git (a stuck filesystem, a huge worktree) must not hold a run forever.
SNAPSHOT_GIT_TIMEOUT_SECONDS = float(os.environ.get("SNAPSHOT_GIT_TIMEOUT_SECONDS", "60"))

# Bounded answers (CONTRACT "Pages and limits"): message and session lists come in pages of
# ``limit`` (default / most), a page of messages stops at about API_PAGE_MAX_BYTES, and each
# part field in a list or an event is cut at API_PART_FIELD_MAX characters (``truncated``;
# GET /api/parts/{id}/ gives it whole).
API_PAGE_DEFAULT = int(os.environ.get("API_PAGE_DEFAULT", "50"))
API_PAGE_MAX = int(os.environ.get("API_PAGE_MAX", "200"))
API_PAGE_MAX_BYTES = int(os.environ.get("API_PAGE_MAX_BYTES", str(4 * 1024 * 1024)))
API_PART_FIELD_MAX = int(os.environ.get("API_PART_FIELD_MAX", str(64 * 1024)))
# A worktree listing (GET …/files/) names at most this many files.
API_FILES_MAX = int(os.environ.get("API_FILES_MAX", "10000"))
# What one user may hold: a tool write past a worktree's or a file's size is a tool error;
# a session past the count is refused with 429 QuotaExceeded. 0 = no limit.
WORKTREE_MAX_BYTES = int(os.environ.get("WORKTREE_MAX_BYTES", str(200 * 1024 * 1024)))
WORKTREE_MAX_FILE_BYTES = int(os.environ.get("WORKTREE_MAX_FILE_BYTES", str(20 * 1024 * 1024)))
# Files, directories and links a worktree may hold (each an inode and a directory slot, which
# WORKTREE_MAX_BYTES does not count); a shell command past it is killed and undone. 0: none.
WORKTREE_MAX_ENTRIES = int(os.environ.get("WORKTREE_MAX_ENTRIES", "100000"))
SESSIONS_PER_USER_MAX = int(os.environ.get("SESSIONS_PER_USER_MAX", "1000"))
# Quotas (quotas_app, docs/quotas.md): the deployment's default of each per-user limit, for
# users whose own quota and groups' quotas leave it blank. 0 = unlimited (the default).
# SESSIONS_PER_USER_MAX and WORKTREE_MAX_BYTES are the defaults of "sessions" and
# "worktree bytes".
QUOTA_RUNS_PER_MINUTE = int(os.environ.get("QUOTA_RUNS_PER_MINUTE", "0"))
QUOTA_TOKENS_PER_DAY = int(os.environ.get("QUOTA_TOKENS_PER_DAY", "0"))
QUOTA_COST_PER_MONTH = os.environ.get("QUOTA_COST_PER_MONTH", "0")  # US dollars, e.g. "25.00"
QUOTA_CONCURRENT_RUNS = int(os.environ.get("QUOTA_CONCURRENT_RUNS", "0"))
# GET /api/usage/: the longest range it sums (days) and the most rows it lists.
USAGE_API_MAX_DAYS = int(os.environ.get("USAGE_API_MAX_DAYS", "366"))
USAGE_API_MAX_ROWS = int(os.environ.get("USAGE_API_MAX_ROWS", "1000"))
# Export and import (runs_app/services/export.py, importing.py): an export holds at most
# EXPORT_MAX_BYTES of file content (the files at the head and the snapshots' history), and is
# refused (413) past it; an import body may be IMPORT_MAX_BODY_BYTES (the JSON, base64 and
# all: far above DATA_UPLOAD_MAX_MEMORY_SIZE, for that one endpoint) and hold at most these
# many messages (and runs), parts, files and snapshot objects.
EXPORT_MAX_BYTES = int(os.environ.get("EXPORT_MAX_BYTES", str(50 * 1024 * 1024)))
IMPORT_MAX_BODY_BYTES = int(os.environ.get("IMPORT_MAX_BODY_BYTES", str(100 * 1024 * 1024)))
IMPORT_MAX_MESSAGES = int(os.environ.get("IMPORT_MAX_MESSAGES", "10000"))
IMPORT_MAX_PARTS = int(os.environ.get("IMPORT_MAX_PARTS", "100000"))
IMPORT_MAX_FILES = int(os.environ.get("IMPORT_MAX_FILES", "10000"))
IMPORT_MAX_OBJECTS = int(os.environ.get("IMPORT_MAX_OBJECTS", "100000"))

# Websockets: every open socket re-checks this often that its credentials (the session
# cookie's user and auth hash, or the ?token=) still reach its conversation, and closes
# with 4403 when they do not (issue 12). One to three indexed queries per socket per period.
WS_AUTH_RECHECK_SECONDS = float(os.environ.get("WS_AUTH_RECHECK_SECONDS", "5"))
