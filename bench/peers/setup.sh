#!/usr/bin/env bash
# Create bench/.peers-venv with agno 3.1.10 and its SQLite/PostgreSQL store dependencies.
# Idempotent: a marker holding the hash of requirements.txt skips the install when nothing changed.
# Silent on success except one line after an actual install; on failure prints pip's log.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="$(dirname "$here")/.peers-venv"
requirements="$here/requirements.txt"
marker="$venv/.peers-installed"

# The venv ignores itself (what `python -m venv` does on its own from 3.13 on): git status stays clean.
ignore_venv() { [[ -f "$venv/.gitignore" ]] || echo '*' >"$venv/.gitignore"; }

want="$(sha256sum "$requirements" | cut -d' ' -f1)"
if [[ -x "$venv/bin/python" && -f "$marker" && "$(cat "$marker")" == "$want" ]]; then
    ignore_venv
    exit 0
fi

python="${PEERS_PYTHON:-$(command -v python3.11 || command -v python3 || true)}"
if [[ -z "$python" ]]; then
    echo "setup.sh: no python3.11 or python3 on PATH (set PEERS_PYTHON)" >&2
    exit 1
fi

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if ! {
    "$python" -m venv "$venv" &&
        "$venv/bin/python" -m pip install --quiet --requirement "$requirements"
} >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup.sh: installing the peer venv failed (log above)" >&2
    exit 1
fi
ignore_venv
echo "$want" >"$marker"
version="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("agno"))')"
echo "peers venv ready: $venv (agno $version)"
