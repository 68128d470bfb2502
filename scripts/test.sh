#!/usr/bin/env bash
# The tests, in three steps:
#   1. nbdev-clean and nbdev-export leave no diff, README.md matches nbs/index.ipynb;
#   2. the native pass: nbdev-test on the library notebooks and pytest on every test (which runs every experiment
#      notebook once, at profile=smoke, through papermill: tests/test_experiments.py), two workers with one torch
#      thread each;
#   3. the portable kernel pass: the numerical library notebooks and tests (`pytest -m kernels`, the modules listed
#      in tests/conftest.py, less those marked kernel_free) again, with PyTorch's, numba's, MKL's and oneDNN's CPU dispatch forced to their portable
#      paths (ATEN_CPU_CAPABILITY=default, NUMBA_CPU_NAME=generic, MKL_CBWR=COMPATIBLE, ONEDNN_MAX_CPU_ISA=SSE41).
#      A tolerance that only this CPU's SIMD kernels meet fails here, on the developer's machine, rather than on a
#      user's CPU: every x86-64 machine can select these paths, so every machine checks the same second path.
#      DIFFGEO_KERNEL_PASSES=native skips it (a quick run; CI and the README's command keep it).
# Arguments go to both pytest runs. The Slurm test runs where CI is set (not 0 or false) or with DIFFGEO_TEST_SLURM=1: only then are
# Debian's Slurm, munge and MariaDB installed (as root, scripts/install_slurm.sh); otherwise it is skipped, saying so.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
t0=$SECONDS
took() { echo "-- $1: $((SECONDS - t0)) s since the start"; }

# numba compiles the CPAB and Gaussian kernels on first use, once per kernel path (native, then NUMBA_CPU_NAME=generic):
# about 45 s of CPU each on a fresh clone. Compile them into numba's cache on the second core while the single-threaded
# steps below (nbdev-clean/export, README, Slurm's install under CI) run, instead of inside the timed passes.
warm='import torch; from diffgeo import cpab, diffeo; t = cpab.Tessellation((3, 3), zero_boundary=True); th = cpab.sample(t, 2).requires_grad_(True); cpab.warp(torch.rand(2, 1, 8, 8), th, t).sum().backward(); diffeo.deform(torch.rand(2, 1, 8, 8), 1e-3, 3, "gaussian")'
( OMP_NUM_THREADS=1 python -c "$warm"; OMP_NUM_THREADS=1 NUMBA_CPU_NAME=generic python -c "$warm" ) > /dev/null 2>&1 &
warm_pid=$!
trap '{ pkill -P "$warm_pid"; kill "$warm_pid"; } 2> /dev/null || true' EXIT

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

# Byte-compile the package once, after nbdev-export rewrote it: where PYTHONDONTWRITEBYTECODE is set (this workplace sets
# it) no process caches what it compiles, and every notebook kernel, pytest worker and subprocess of the tests would
# compile diffgeo's modules again (__pycache__/ is ignored by git; Python checks each file against its source's mtime).
python -m compileall -q diffgeo

export OMP_NUM_THREADS=1 DIFFGEO_PROGRESS=0
library='^(fig5|template|petrini_|detlefsen_|zavatoneveth_|moskalev_|rousseau_)'   # experiment notebooks: pytest runs them
numerical='^(0[5-9]|[1-4][0-9]|6[0-9])_'   # the numerical layers, maps (05) to the measures (40-49) and riemann (60)
xdist=(-n 2 --dist loadgroup)                     # two workers; the Slurm test's cluster stays on one (its xdist_group)

case "${CI:-}" in ""|0|false|False|FALSE) ci="" ;; *) ci=1 ;; esac
if [ -n "$ci" ] || [ "${DIFFGEO_TEST_SLURM:-}" = 1 ]; then bash scripts/install_slurm.sh; fi
python -c 'import torch; print(f"native kernels: PyTorch {torch.backends.cpu.get_cpu_capability()}")'
nbdev-test --n-workers 2 --timing --skip-file-re "$library"
took "nbdev-test, native"
python -m pytest -q "${xdist[@]}" "$@"
took "pytest, native"

if [ "${DIFFGEO_KERNEL_PASSES:-both}" = native ]; then echo "portable kernel pass skipped (DIFFGEO_KERNEL_PASSES=native)"; exit 0; fi
export ATEN_CPU_CAPABILITY=default NUMBA_CPU_NAME=generic MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41 DIFFGEO_KERNEL_PATH=portable
python -c 'import torch; print(f"portable kernel pass: PyTorch {torch.backends.cpu.get_cpu_capability()}, numba generic, MKL compatible, oneDNN SSE4.1")'
nbdev-test --n-workers 2 --timing --file-re "$numerical"
took "nbdev-test, portable kernels"
python -m pytest -q "${xdist[@]}" "$@" -m "kernels and not kernel_free"     # after "$@": a -m given to the script selects the native pass only
took "pytest -m kernels, portable kernels"
