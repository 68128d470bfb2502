#!/usr/bin/env bash
# Run one experiment's long (or paper) profile as a background-friendly job that survives the loss of its machine's disk:
# from a clean checkout of the code outside this repository, one torch thread, its work folder outside the checkout.
#
#   bash scripts/long_job.sh EXPERIMENT PROFILE            # start, or resume from results/in_progress/EXPERIMENT_PROFILE
#   bash scripts/long_job.sh EXPERIMENT PROFILE TAG        # a variant the experiment declares (Experiment.variant), e.g. petrini_fig3 long steps
#   bash scripts/long_job.sh --park EXPERIMENT PROFILE     # copy the finished cells' shards into results/in_progress/
#   bash scripts/long_job.sh --park --checkpoints EXPERIMENT PROFILE   # and the unfinished cells' training checkpoints
#   bash scripts/long_job.sh --reuse EXPERIMENT PROFILE [TAG]   # resume a parked run with this branch's code (see below)
#
# Park after stopping the job, or while it runs (shards and checkpoints are written whole, then renamed); a finished job
# (its log ends with DONE) is landed with scripts/land_run.sh instead.
#
# --checkpoints is for runs whose cells take hours (one-cell runs such as zavatoneveth_fig3): a checkpoint holds the
# weights and optimiser state (megabytes each, committed into git), so park them only where a cell would otherwise be
# lost at the session's end; checkpoint files over 20 MB are refused.
#
# Where a run was parked (results/in_progress/EXPERIMENT_PROFILE/SOURCE names the commit and the work folder's sub-path),
# the job checks out that commit (a sweep keeps only shards of the code it runs) and copies the shards into its work
# folder first; otherwise it checks out this repository's HEAD. The run writes results/ and figures/ inside its checkout
# (land them with scripts/land_run.sh once its log ends with DONE) and its log to RUNS/EXPERIMENT_PROFILE.log.
# RUNS is $DIFFGEO_RUNS, or ~/diffgeo-runs; the data folder is $DIFFGEO_DATA.
#
# --reuse resumes a parked run with this repository's HEAD instead of the parked commit, keeping the cells and checkpoints
# that other code computed (code_changed='reuse': the dataset records it, with each cell's commit in cell_commits). For a
# fix that cannot change what the parked cells computed, such as one that lets their checkpoints load on another machine;
# the parked SOURCE then says "code_changed reuse", and later resumes keep it.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
park=0; ckpts=0; reuse=0
if [ "${1:-}" = "--reuse" ]; then reuse=1; shift; fi
if [ "${1:-}" = "--park" ]; then park=1; shift; fi
if [ "$park" = 1 ] && [ "${1:-}" = "--checkpoints" ]; then ckpts=1; shift; fi
[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: long_job.sh [--reuse | --park [--checkpoints]] EXPERIMENT PROFILE [TAG]" >&2; exit 2; }
exp=$1; prof=$2; tag=${3:-}
name="${exp}_${prof}${tag:+_$tag}"   # the job's name: its log, work folder and parked folder
runs="${DIFFGEO_RUNS:-$HOME/diffgeo-runs}"
src="$runs/src_${name}"; work="$runs/work_${name}"; parked="$root/results/in_progress/${name}"

if [ "$park" = 1 ]; then
  log="$runs/${name}.log"
  if [ -f "$log" ] && [ "$(tail -n 1 "$log")" = "DONE" ]; then
    echo "$name has finished (its log ends with DONE): land it with scripts/land_run.sh $exp $prof $tag instead" >&2; exit 1
  fi
  runsdirs=$(ls -d "$work/$exp/${prof}${tag:+_$tag}"_* 2>/dev/null || true)
  [ -n "$runsdirs" ] || { echo "no run of $exp $prof under $work" >&2; exit 1; }
  [ "$(echo "$runsdirs" | wc -l)" = 1 ] || { echo "more than one run of $exp $prof under $work (other settings or tags):" \
    $runsdirs "; delete the ones that are not this job's" >&2; exit 1; }
  rundir=$runsdirs
  commit=$(git -C "$src" rev-parse HEAD 2>/dev/null || true)
  [ -n "$commit" ] || { echo "no checkout of the job at $src: nothing says which code computed the run" >&2; exit 1; }
  git -C "$root" merge-base --is-ancestor "$commit" HEAD 2>/dev/null || { echo "the job's commit $commit is not in this" \
    "branch's history (amended or rebased since?): a fresh clone could not resume it; name a commit of the branch with the" \
    "same tree in SOURCE" >&2; exit 1; }
  shards="$rundir/shards"   # a sweep's finished cells (a one-cell run has none: park its checkpoints)
  [ -d "$shards" ] || [ "$ckpts" = 1 ] || { echo "no shards of $exp $prof under $work (a one-cell run: --park --checkpoints)" >&2; exit 1; }
  ck="$rundir/checkpoints"
  if [ "$ckpts" = 1 ] && [ -d "$ck" ]; then   # refused before anything is copied
    big=$(find "$ck" -type f -size +20M)
    [ -z "$big" ] || { echo "checkpoints over 20 MB, not parked: $big" >&2; exit 1; }
  fi
  mkdir -p "$parked"
  if [ -d "$shards" ]; then cp "$shards"/*.nc "$parked"/ 2>/dev/null || true; fi   # none yet is no error
  rm -rf "$parked/checkpoints"   # only what this park asks for is restored
  kept=""
  if [ "$ckpts" = 1 ]; then
    mkdir -p "$parked/checkpoints"
    if [ -d "$ck" ] && [ -n "$(ls -A "$ck")" ]; then cp -r "$ck"/. "$parked/checkpoints"/; fi   # a cell's kept parts: folders
    kept="$(find "$parked/checkpoints" -type f | wc -l)"
  fi
  # the networks the finished cells kept (zoo/NAME in the job's checkout, issue 62): a resumed run does not train a finished
  # cell again, so they would be lost with the machine's runs folder
  rm -rf "$parked/zoo"
  if [ -d "$src/zoo/$name" ] && [ -n "$(ls -A "$src/zoo/$name")" ]; then mkdir -p "$parked/zoo" && cp -r "$src/zoo/$name"/. "$parked/zoo"/; fi
  printf 'commit %s\nsub-path %s\ncells %s done (parked %s)\n' "$commit" "${shards#"$work"/}" \
    "$(ls "$parked"/*.nc 2>/dev/null | wc -l)" "$(date -u +%FT%TZ)" > "$parked/SOURCE"
  [ -z "$kept" ] || echo "checkpoint files $kept (of the unfinished cells, in checkpoints/)" >> "$parked/SOURCE"
  [ ! -f "$runs/${name}.reuse" ] || echo "code_changed reuse" >> "$parked/SOURCE"
  [ ! -d "$parked/zoo" ] || echo "kept networks $(find "$parked/zoo" -type f | wc -l) (of the finished cells, in zoo/)" >> "$parked/SOURCE"
  cat "$parked/SOURCE"; exit 0
fi

commit=$(git -C "$root" rev-parse HEAD)
if [ -f "$parked/SOURCE" ]; then
  commit=$(awk '/^commit/ {print $2}' "$parked/SOURCE"); sub=$(awk '/^sub-path/ {print $2}' "$parked/SOURCE")
  [ -n "$commit" ] && [ -n "$sub" ] || { echo "$parked/SOURCE lacks its 'commit' or 'sub-path' line: cannot resume" >&2; exit 1; }
  if grep -q '^code_changed reuse' "$parked/SOURCE"; then reuse=1; fi
  if [ "$reuse" = 1 ]; then commit=$(git -C "$root" rev-parse HEAD); fi   # the parked cells are kept, not recomputed
elif [ "$reuse" = 1 ]; then
  echo "--reuse resumes a parked run, and $parked/SOURCE does not exist" >&2; exit 1
fi
mkdir -p "$runs"
[ -d "$src/.git" ] || git clone -q "$root" "$src"
git -C "$src" cat-file -e "$commit^{commit}" 2>/dev/null || git -C "$src" fetch -q origin   # a clone older than the commit: every branch
git -C "$src" checkout -q "$commit"
if [ "$reuse" = 1 ]; then touch "$runs/${name}.reuse"; else rm -f "$runs/${name}.reuse"; fi
if [ -f "$parked/SOURCE" ]; then
  mkdir -p "$work/$sub" && { cp -n "$parked"/*.nc "$work/$sub"/ 2>/dev/null || true; }
  if [ -d "$parked/checkpoints" ]; then
    mkdir -p "$work/$(dirname "$sub")/checkpoints" && cp -rn "$parked/checkpoints"/. "$work/$(dirname "$sub")/checkpoints"/ 2>/dev/null || true
  fi
  if [ -d "$parked/zoo" ]; then mkdir -p "$src/zoo/$name" && cp -rn "$parked/zoo"/. "$src/zoo/$name"/; fi
  echo "resuming $exp $prof at $commit from $(ls "$parked"/*.nc 2>/dev/null | wc -l) parked cells, $(find "$parked/checkpoints" -type f 2>/dev/null | wc -l) checkpoint files and $(find "$parked/zoo" -type f 2>/dev/null | wc -l) kept networks"
fi
source "$root/scripts/setup.sh"   # the project's environment (the checkout's own code comes first on PYTHONPATH)
cd "$src"
# glibc's allocator would hand memory back to the kernel after every training step (thousands of page faults a step);
# these thresholds keep it, with bit-identical results (issue 59: 1.06-1.26x per step)
GLIBC_TUNABLES="glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=17179869184" \
PYTHONPATH="$src" OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NUMBA_NUM_THREADS=1 python - "$exp" "$prof" "$work" "$tag" "$reuse" <<'PY' >> "$runs/${name}.log" 2>&1
import importlib, os, sys
import torch
torch.set_num_threads(1)
import diffgeo
exp, prof, work, tag, reuse = sys.argv[1:]
assert diffgeo.__file__.startswith(os.environ["PYTHONPATH"]), f"imported {diffgeo.__file__}, not the checkout's"
importlib.import_module(f"diffgeo.experiments.{exp}").EXPERIMENT.main(prof, tag=tag, work_dir=work, executor="inline", show=False,
                                                                    code_changed="reuse" if reuse == "1" else "recompute")
print("DONE", flush=True)
PY
