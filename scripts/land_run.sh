#!/usr/bin/env bash
# Land a finished long (or paper) run of scripts/long_job.sh in this repository:
#
#   bash scripts/land_run.sh EXPERIMENT PROFILE [TAG]
#
# It refuses unless the job's log ends with DONE. Then it copies the run's dataset from the job's checkout into results/
# (and the networks it kept, zoo/<experiment>..., where its cells keep them, with their probe images: written from the
# data set, DIFFGEO_DATA, where the run did not write them),
# redraws its figures here from the dataset alone (with this checkout's figure code), stores the ledger's tables and the
# README's, deletes results/in_progress/EXPERIMENT_PROFILE, and prints what is left to do by hand: a section of the
# experiment's notebook that prints the run from its file (no typed numbers), its stored outputs, the tests, the commit.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
[ $# -eq 2 ] || [ $# -eq 3 ] || { echo "usage: land_run.sh EXPERIMENT PROFILE [TAG]" >&2; exit 2; }
exp=$1; prof=$2; tag=${3:-}
name="${exp}_${prof}${tag:+_$tag}"
runs="${DIFFGEO_RUNS:-$HOME/diffgeo-runs}"
src="$runs/src_${name}"; log="$runs/${name}.log"
[ -f "$log" ] && [ "$(tail -n 1 "$log")" = "DONE" ] || { echo "$name has not finished: $log does not end with DONE" >&2; exit 1; }
source "$root/scripts/setup.sh"
cd "$root"
python - "$exp" "$prof" "$src" "$tag" <<'PY'
import importlib, shutil, sys
from pathlib import Path
from diffgeo import results, zoo
exp, prof, src, tag = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
E = importlib.import_module(f"diffgeo.experiments.{exp}").EXPERIMENT
here = E.paths(prof, tag=tag).dataset
there = src / here.relative_to(results.output_root())
ds = E.load(there)                      # checked against the experiment's schema before it replaces anything
shutil.copy2(there, here)
print(f"copied {there} -> {here} (commit {ds.attrs.get('git_commit', '?')[:7]}, {ds.attrs.get('processor', '?')}, "
      f"{results.core_hours(ds):.1f} core-hours)")
kept = E.paths(prof, tag=tag).artifacts                # the networks the run kept (zoo/), where its cells keep any
made = src / kept.relative_to(results.output_root())
if made.is_dir() and any(made.iterdir()):
    shutil.copytree(made, kept, dirs_exist_ok=True)
    print(f"copied the {len(list(made.glob('*.pt')))} kept networks {made} -> {kept}")
    if not (kept / zoo.PROBE_FILE).exists():           # kept by code older than the probe file: write it from the data set
        try: print(f"wrote {zoo.write_probe_images(E.name, prof, tag)} from the data set (checked against every network)")
        except FileNotFoundError as e:
            print(f"no probe images written ({e}); write them where the data set is: python scripts/zoo_probes.py {exp} {prof} {tag}".rstrip())
E.main(prof, tag=tag, redraw=True, show=False)
print("redrew", ", ".join(str(p.relative_to(results.output_root())) for p in E.paths(prof, tag=tag).figures.values()))
PY
python scripts/store_claims.py
python scripts/readme.py
rm -rf "results/in_progress/${name}"
git status --short
nb=$(python -c "import importlib, sys; print(importlib.import_module(f'diffgeo.experiments.{sys.argv[1]}').EXPERIMENT.notebook)" "$exp")
if grep -q "is being made\\|being made on one thread\\|will hold the committed run" "nbs/$nb"; then
  echo "nbs/$nb still says the run is in progress ('is being made', 'will hold the committed run'): say what was run, in the past tense"
fi
cat <<EOF
Left to do by hand:
  - a section in nbs/$nb that prints the run from its file (its numbers formatted from the dataset), and the prose;
  - DIFFGEO_REDRAW=1 python scripts/store_outputs.py nbs/$nb; nbdev-clean;
  - the tests (CI=true bash scripts/test.sh), then commit from a clean tree.
EOF
