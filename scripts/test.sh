#!/usr/bin/env bash
# The tests: nbdev-clean and nbdev-export leave no diff, README.md matches nbs/index.ipynb,
# nbdev-test passes on the library notebooks, pytest passes (it runs every experiment notebook once, at
# profile=smoke, through papermill: tests/test_experiments.py).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"

snapshot() { git status --porcelain --untracked-files=all; git diff; }
before="$(snapshot | sha1sum)"
nbdev-clean
nbdev-export
python scripts/readme.py
if [ "$(snapshot | sha1sum)" != "$before" ]; then
  echo "FAIL: nbdev-clean / nbdev-export / scripts/readme.py changed files; commit their output:" >&2
  git status --short >&2
  exit 1
fi
echo "nbdev-clean, nbdev-export and README leave no diff"
OMP_NUM_THREADS=1 nbdev-test --n-workers 2 --skip-file-re '^(fig5|template|petrini_|detlefsen_|zavatoneveth_|moskalev_|rousseau_)'
# a real single-node Slurm for tests/test_slurm.py: Debian's packages where this machine can install them
[ -n "${DIFFGEO_NO_SLURM_INSTALL:-}" ] || bash scripts/install_slurm.sh
python -m pytest -q "$@"
