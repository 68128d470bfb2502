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
# two jobs started together (scripts/long_job.sh) would install into one folder at once and break it: one at a time
mkdir -p "$venv" && exec 9> "$venv/.setup-lock" && flock 9
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "Setting up $venv (first run only; a few minutes)..." >&2
  [ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
  "$venv/bin/python" -m pip install -q --upgrade pip
  # pip byte-compiles what it installs one file at a time (about 50 s of the install here); compileall does it on every
  # core. The bytecode matters where PYTHONDONTWRITEBYTECODE is set: no process would cache what it compiles.
  "$venv/bin/python" -m pip install -q --no-compile -e "$root[dev]"
  "$venv/bin/python" -m compileall -q -j 0 "$venv/lib" > /dev/null || true   # a file that does not compile is left as pip leaves it
  echo "$want" > "$stamp"
fi
flock -u 9; exec 9>&-
export PATH="$venv/bin:$PATH"
export MPLBACKEND=Agg
