#!/usr/bin/env bash
# Creates the project-local virtual environment .venv on first use and installs diffgeo
# (editable, with the dev extra) into it; later runs skip this unless pyproject.toml changed.
# Sourced by scripts/reproduce.sh and scripts/test.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
py="${PYTHON:-python3}"
"$py" -c 'import sys; assert sys.version_info >= (3, 11), "diffgeo needs Python 3.11 or newer"' ||
  { echo "Set PYTHON to a Python 3.11+ interpreter." >&2; exit 1; }
stamp="$venv/.diffgeo-installed"
want="$(sha1sum "$root/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "Setting up $venv (first run only; a few minutes)..." >&2
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  "$venv/bin/python" -m pip install -q -e "$root[dev]"
  echo "$want" > "$stamp"
fi
export PATH="$venv/bin:$PATH"
export MPLBACKEND=Agg
