"""Settings for both modes.

Services mode: DATABASE_URL (PostgreSQL) and REDIS_URL set. Embedded mode: neither set, SQLite
(WAL), the in-memory channel layer and runs executed in-process by the web server.
"""

from __future__ import annotations

import os
import tomllib
from datetime import timedelta
from pathlib import Path

from csp.constants import NONE, SELF
from django.core.exceptions import ImproperlyConfigured

from config.databases import database_from_url, sqlite
from config.environment import BASE_DIR, env_bool
from config.secret_key import secret_key

# Django reads a settings module's upper-case names: the groups of settings kept in their own
# modules are imported whole.
from config.settings_agent import *  # noqa: F403
from config.settings_limits import *  # noqa: F403
from config.settings_runs import *  # noqa: F403

DEBUG = env_bool("DEBUG", False)
ALLOWED_HOSTS = [h.strip() for h in os.environ.get("ALLOWED_HOSTS", "*").split(",") if h.strip()]
CSRF_TRUSTED_ORIGINS = [
    o.strip() for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o.strip()
]

DATABASE_URL = os.environ.get("DATABASE_URL", "")
REDIS_URL = os.environ.get("REDIS_URL", "")
EMBEDDED = not REDIS_URL

SECRET_KEY = secret_key(debug=DEBUG, embedded=EMBEDDED)

# Services-mode web and worker refuse to start as root unless this is set (config/privileges.py;
# docs/semantics.md §11.3): the shipped units and image run them as the `agentplat` user.
ALLOW_ROOT = env_bool("ALLOW_ROOT", False)

DATABASES = {
    "default": database_from_url(DATABASE_URL)
    if DATABASE_URL
    else sqlite(BASE_DIR / "var/db.sqlite3")
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
    # After quotas_app: it extends the user admin that quotas_app registers.
    "sessions_app.accounts",
]

MIDDLEWARE = [
    # Django's, with the hooks that do no I/O run on the server's loop (config/middleware.py).
    "config.middleware.SecurityMiddleware",
    # Before axes' middleware, so that the lockout page it puts in place gets the policy too.
    "config.middleware.CSPMiddleware",
    "api.guards.NulGuardMiddleware",
    "config.middleware.SessionMiddleware",
    "config.middleware.CommonMiddleware",
    "config.middleware.CsrfViewMiddleware",
    "config.middleware.AuthenticationMiddleware",
    "config.middleware.MessageMiddleware",
    "config.middleware.XFrameOptionsMiddleware",
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
HTTPS = env_bool("HTTPS", False)
SESSION_COOKIE_SECURE = HTTPS
CSRF_COOKIE_SECURE = HTTPS
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https") if HTTPS else None
# HTTPS_REDIRECT=false where the proxy redirects http to https itself.
SECURE_SSL_REDIRECT = HTTPS and env_bool("HTTPS_REDIRECT", True)
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
        "sessions_app.api.token_auth.TokenAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["api.guards.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["api.guards.StrictJSONParser"],
    "EXCEPTION_HANDLER": "api.errors.exception_handler",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Agent sessions platform API",
    # The release this code is (CHANGELOG.md): the schema and /api/docs/ say which.
    "VERSION": tomllib.loads((BASE_DIR / "pyproject.toml").read_text())["project"]["version"],
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
# No task's result is read (a run's outcome is its row): none is stored or announced.
CELERY_TASK_IGNORE_RESULT = True
# Deployments (or test suites) that share one Redis keep their runs apart by queue name.
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("CELERY_QUEUE", "agentplat")
# A task of a worker that died is delivered again after this many seconds (Redis broker).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": int(os.environ.get("CELERY_VISIBILITY_TIMEOUT", "300"))
}

_workspace_root = os.environ.get("WORKSPACE_ROOT", str(BASE_DIR / "var/workspaces"))
# WORKSPACE_ROOT set to "" (a web process of a deployment of several worker hosts): this
# process holds no worktree; it reads snapshots from its mirror of the central store
# (MIRROR_ROOT) and sends the work that touches files to the session's home host.
HOLDS_WORKTREES = _workspace_root != ""
WORKSPACE_ROOT = Path(_workspace_root or BASE_DIR / "var/no-worktrees")
MIRROR_ROOT = Path(os.environ.get("MIRROR_ROOT", str(BASE_DIR / "var/mirror")))
# Share links need a login to read by default; true lets anyone with the link read (never
# write; forking always needs a login).
SHARE_ANONYMOUS_READ = env_bool("SHARE_ANONYMOUS_READ", False)
# Self sign-up at /signup/ (docs/accounts.md): "off" (users are added in the admin, by an
# invitation link or with manage.py adduser), "open", or "approval" (a new account waits for an
# admin). ALLOW_SIGNUP=true, the older switch, is read as SIGNUP=open.
SIGNUP = os.environ.get("SIGNUP", "off").strip().lower()
if SIGNUP not in ("off", "open", "approval"):
    raise ImproperlyConfigured(f"SIGNUP must be off, open or approval, not {SIGNUP!r}.")
ALLOW_SIGNUP = env_bool("ALLOW_SIGNUP", False)
# How long an invitation link made in the admin stays valid.
INVITATION_DAYS = float(os.environ.get("INVITATION_DAYS", "7"))
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

# Websockets: every open socket re-checks this often that its credentials (the session
# cookie's user and auth hash, or the ?token=) still reach its conversation, and closes
# with 4403 when they do not (issue 12). One to three indexed queries per socket per period.
WS_AUTH_RECHECK_SECONDS = float(os.environ.get("WS_AUTH_RECHECK_SECONDS", "5"))
