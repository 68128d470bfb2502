#!/usr/bin/env bash
# The tests, in three steps:
#   1. nbdev-clean, nbdev-export and scripts/refresh.py --quick (sidebar, navigation bar, README) leave no diff;
#   2. the native pass: nbdev-test on the library notebooks and pytest on every test (which runs every experiment
#      notebook once, at profile=smoke, through papermill: tests/test_experiments.py, in Jupyter kernels forked from a
#      process with torch and the other heavy libraries imported, tests/kernel_fork.py; DIFFGEO_TEST_KERNEL=python3 for
#      plain ones), two workers with one torch thread each;
#   3. the portable kernel pass: the numerical library notebooks and tests (`pytest -m kernels`, the modules listed
#      in tests/conftest.py, less those marked kernel_free) again, with PyTorch's, numba's, MKL's and oneDNN's CPU
#      dispatch forced to their portable paths (ATEN_CPU_CAPABILITY=default, NUMBA_CPU_NAME=generic, MKL_CBWR=COMPATIBLE,
#      ONEDNN_MAX_CPU_ISA=SSE41).
#      A tolerance that only this CPU's SIMD kernels meet fails here, on the developer's machine, rather than on a
#      user's CPU: every x86-64 machine can select these paths, so every machine checks the same second path.
#      DIFFGEO_KERNEL_PASSES=native skips it (a quick run; CI and the README's command keep it).
# Arguments go to both pytest runs. The Slurm test runs where CI is set (not 0 or false) or with DIFFGEO_TEST_SLURM=1: only then are
# Debian's Slurm, munge and MariaDB installed (as root, scripts/install_slurm.sh); otherwise it is skipped, saying so.
# Where CI is set, Debian's Chromium is installed too (scripts/install_chromium.sh) for tests/test_pages.py.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
t0=$SECONDS
took() { echo "-- $1: $((SECONDS - t0)) s since the start"; }

# numba compiles the CPAB and Gaussian kernels on first use, once per kernel path (native, then NUMBA_CPU_NAME=generic)
# and once per signature (the Gaussian kernel: per dtype and window size 2r, the 8 pairs the tests use): on a
# fresh clone about 45 s of CPU for CPAB and 3 s per Gaussian signature, per path. Two background streams (CPAB; the
# Gaussian kernel and the positions) compile them into numba's cache while the single-threaded steps below run
# (nbdev-clean/export, README, Slurm's install under CI); the native pass waits for their native halves, so that no
# notebook or test compiles a kernel a second time beside them, and the generic halves overlap the native pass.
warm_cpab='import torch; from diffgeo import cpab; t = cpab.Tessellation((3, 3), zero_boundary=True); th = cpab.sample(t, 2).requires_grad_(True); cpab.warp(torch.rand(2, 1, 8, 8), th, t).sum().backward()'
warm_gauss='import torch; from diffgeo import diffeo, maps
for dt, sigmas in ((torch.float32, (0.3, 0.5, 2.0, 4.0)), (torch.float64, (0.3, 0.5, 1.5, 4.0))):   # the windows the tests use
    x, p = torch.rand(2, 1, 8, 8, dtype=dt), 7 * torch.rand(1, 8, 8, dtype=dt)
    for sigma in sigmas: maps.sample_gaussian(x, p, p, sigma)   # 2r = 4, 6, 16 or 12, 30
    diffeo.deform(x, 1e-3, 3, "gaussian")'
warm_dir="$(mktemp -d)"
warm() {  # warm NAME CODE: the native half, a mark, the generic half
  OMP_NUM_THREADS=1 python -c "$2" > /dev/null 2>&1 || true; touch "$warm_dir/$1"   # a failure here shows in the tests
  OMP_NUM_THREADS=1 NUMBA_CPU_NAME=generic python -c "$2" > /dev/null 2>&1 || true
}
warm cpab "$warm_cpab" & warm_pids=$!
warm gauss "$warm_gauss" & warm_pids="$warm_pids $!"
# Slurm's packages (where CI is set: the header) install in the background too, mostly waiting on the registry and the disk; the
# native pytest run, which holds the Slurm test, waits for them. An early exit waits for apt-get rather than kill it.
case "${CI:-}" in ""|0|false|False|FALSE) ci="" ;; *) ci=1 ;; esac
slurm_pid=""
# Under CI, Chromium too, for the offline pages' test (tests/test_pages.py), which fails there without it.
if [ -n "$ci" ] || [ "${DIFFGEO_TEST_SLURM:-}" = 1 ]; then
  { bash scripts/install_slurm.sh; [ -z "$ci" ] || bash scripts/install_chromium.sh; } & slurm_pid=$!
fi
trap '{ for p in $warm_pids; do pkill -P "$p"; kill "$p"; done; rm -rf "$warm_dir"; [ -z "$slurm_pid" ] || wait "$slurm_pid"; } 2> /dev/null || true' EXIT

snapshot() { git status --porcelain --untracked-files=all; git diff; }
before="$(snapshot | sha1sum)"
nbdev-clean
nbdev-export
python scripts/refresh.py --quick > /dev/null   # the sidebar, the navigation bar's Papers menu and the README
if [ "$(snapshot | sha1sum)" != "$before" ]; then
  echo "FAIL: nbdev-clean / nbdev-export / scripts/refresh.py --quick changed files; commit their output:" >&2
  git status --short >&2
  exit 1
fi
echo "nbdev-clean, nbdev-export, the navigation and README leave no diff"

# Byte-compile the package once, after nbdev-export rewrote it: where PYTHONDONTWRITEBYTECODE is set (this workplace sets
# it) no process caches what it compiles, and every notebook kernel, pytest worker and subprocess of the tests would
# compile diffgeo's modules again (__pycache__/ is ignored by git; Python checks each file against its source's mtime).
python -m compileall -q diffgeo

export OMP_NUM_THREADS=1 DIFFGEO_PROGRESS=0
library='^(fig5|template|petrini_|detlefsen_|zavatoneveth_|moskalev_|rousseau_)'   # experiment notebooks: pytest runs them
numerical='^(0[5-9]|[1-4][0-9]|6[0-9])_'   # the numerical layers, maps (05) to the measures (40-49) and riemann (60)
xdist=(-n 2 --dist loadgroup)                     # two workers; the Slurm test's cluster stays on one (its xdist_group)

python -c 'import torch; print(f"native kernels: PyTorch {torch.backends.cpu.get_cpu_capability()}")'
for _ in $(seq 600); do [ -e "$warm_dir/cpab" ] && [ -e "$warm_dir/gauss" ] && break; sleep 0.5; done   # the native kernels compiled
took "numba's native kernels compiled"
nbdev-test --n-workers 2 --timing --skip-file-re "$library"
took "nbdev-test, native"
if [ -n "$slurm_pid" ]; then wait "$slurm_pid" || true; slurm_pid=""; took "Slurm's packages installed"; fi
python -m pytest -q "${xdist[@]}" "$@"
took "pytest, native"

if [ "${DIFFGEO_KERNEL_PASSES:-both}" = native ]; then echo "portable kernel pass skipped (DIFFGEO_KERNEL_PASSES=native)"; exit 0; fi
export ATEN_CPU_CAPABILITY=default NUMBA_CPU_NAME=generic MKL_CBWR=COMPATIBLE ONEDNN_MAX_CPU_ISA=SSE41 DIFFGEO_KERNEL_PATH=portable
python -c 'import torch; print(f"portable kernel pass: PyTorch {torch.backends.cpu.get_cpu_capability()}, numba generic, MKL compatible, oneDNN SSE4.1")'
nbdev-test --n-workers 2 --timing --file-re "$numerical"
took "nbdev-test, portable kernels"
python -m pytest -q "${xdist[@]}" "$@" -m "kernels and not kernel_free"     # after "$@": a -m given to the script selects the native pass only
took "pytest -m kernels, portable kernels"
