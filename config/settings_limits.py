"""Limits and quotas (docs/configuration.md, "Limits" and "Quotas and usage"): snapshots,
downloads, repositories and credentials, API pages, worktrees, the per-user quotas' defaults,
export and import. Imported whole by config/settings.py."""

from __future__ import annotations

import os

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
# bytes, each batch sent before the next is read; a patch whose changed files pass the second
# bound is refused before git writes it (an archive holds the same files), and the stream of
# one git writes past it all the same is cut there.
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
# A folder dropped on the page is sent as one multipart file per file (Django's own bound on
# the number of files in one request; larger trees go as an archive).
DATA_UPLOAD_MAX_NUMBER_FILES = int(os.environ.get("UPLOAD_MAX_FOLDER_FILES", "10000"))
# Saved repository credentials are encrypted with Fernet (``cryptography``). CREDENTIALS_KEYS:
# comma-separated Fernet keys, the first encrypts, all decrypt (rotation); empty: one key
# derived from SECRET_KEY (changing SECRET_KEY then makes saved credentials unreadable).
CREDENTIALS_PER_USER_MAX = int(os.environ.get("CREDENTIALS_PER_USER_MAX", "50"))
CREDENTIALS_KEYS = [
    k.strip() for k in os.environ.get("CREDENTIALS_KEYS", "").split(",") if k.strip()
]
# A git call of the snapshots that has not answered after this long is killed and fails with
# SnapshotError: a hung git (a stuck filesystem, a huge worktree) must not hold a run forever.
SNAPSHOT_GIT_TIMEOUT_SECONDS = float(os.environ.get("SNAPSHOT_GIT_TIMEOUT_SECONDS", "60"))

# Bounded answers (docs/api.md "Pages and limits"): message and session lists come in pages of
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
# Sessions cloned from the same commit share one checkout's files by hard link
# (workspace/shared_checkouts.py, where shell commands write into layers): a checkout unused
# for this many days is dropped (0: clones never share files).
SHARED_CHECKOUT_KEEP_DAYS = float(os.environ.get("SHARED_CHECKOUT_KEEP_DAYS", "7"))
