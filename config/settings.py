"""Settings for both modes.

Services mode: DATABASE_URL (PostgreSQL) and REDIS_URL set. Embedded mode: neither set, SQLite
(WAL), the in-memory channel layer and runs executed in-process by the web server.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

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


SECRET_KEY = os.environ.get("SECRET_KEY", "dev-insecure-key-change-me-in-production")
DEBUG = _env_bool("DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not REDIS_URL

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
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "sessions_app.api.guards.NulGuardMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
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

AUTH_PASSWORD_VALIDATORS: list[dict] = []
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
            # layer on this machine kind (see bench/ and the measurements).
            "BACKEND": "channels_redis.pubsub.RedisPubSubChannelLayer",
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
OPENAI_BASE_URL = os.environ.get("OPENAI_BASE_URL", "") or None
OPENAI_API_KEY = os.environ.get("OPENAI_API_KEY", "") or "not-needed"
AGENT_ALLOW_SHELL = _env_bool("AGENT_ALLOW_SHELL", False)
# Share links need a login to read by default; true lets anyone with the link read (never
# write; forking always needs a login).
SHARE_ANONYMOUS_READ = _env_bool("SHARE_ANONYMOUS_READ", False)
# Self sign-up at /signup/ (off: users are added in the admin or with manage.py adduser).
ALLOW_SIGNUP = _env_bool("ALLOW_SIGNUP", False)
AGENT_MAX_STEPS = int(os.environ.get("AGENT_MAX_STEPS", "25"))
# Lease of the per-session busy lock; the running loop renews it every third of this.
RUN_LEASE_SECONDS = float(os.environ.get("RUN_LEASE_SECONDS", "30"))
# Aborts arrive at once (Redis pub/sub / in-process); the database flag is re-read this often.
RUN_ABORT_POLL_SECONDS = float(os.environ.get("RUN_ABORT_POLL_SECONDS", "1.0"))
# Text deltas of one session are coalesced into frames of at most this many milliseconds.
STREAM_FRAME_MS = float(os.environ.get("STREAM_FRAME_MS", "40"))
# Streamed text is written to the database at most this often while a step streams.
STREAM_FLUSH_SECONDS = float(os.environ.get("STREAM_FLUSH_SECONDS", "0.5"))
SCRIPTED_DEFAULT_PACE_MS = float(os.environ.get("SCRIPTED_DEFAULT_PACE_MS", "15"))
EMBEDDED_RUN_THREADS = int(os.environ.get("EMBEDDED_RUN_THREADS", "4"))
# Where runs execute: "celery" (services mode) or "thread" (embedded: in-process pool).
RUN_EXECUTOR = os.environ.get("RUN_EXECUTOR", "thread" if EMBEDDED else "celery")

# Every record carries its session_id and run_id; LOG_FORMAT=json writes one object a line.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "sessions_app.logs.ContextFilter"}},
    "formatters": {
        "text": {
            "()": "sessions_app.logs.TextFormatter",
            "format": "%(asctime)s %(levelname)s %(name)s: %(message)s",
        },
        "json": {"()": "sessions_app.logs.JsonFormatter"},
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
# A run's task is stopped after this long (the soft limit ends the run in "error" first).
RUN_TIME_LIMIT_SECONDS = int(os.environ.get("RUN_TIME_LIMIT_SECONDS", "3600"))
CELERY_TASK_TIME_LIMIT = RUN_TIME_LIMIT_SECONDS + 60
CELERY_TASK_SOFT_TIME_LIMIT = RUN_TIME_LIMIT_SECONDS

# Files larger than this stay out of worktree snapshots (reported in step-finish parts).
SNAPSHOT_MAX_FILE_BYTES = int(os.environ.get("SNAPSHOT_MAX_FILE_BYTES", str(10 * 1024 * 1024)))
