#!/usr/bin/env bash
# The main job: run the flagship experiment notebook (Petrini et al.'s Fig. 5) through papermill. It first says in one
# line which stage it runs and why (`Experiment.main_job`). Where the zoo of the long (x4) run is committed
# (zoo/petrini_fig5_long_x4/: 24 trained networks and their probe images), the default is the measuring stage: each
# network is built at initialisation from its seed and loaded trained from the zoo, both are probed again and Fig. 5 on
# CIFAR-10 is redrawn, nothing trained and no data set needed (the test errors are measured on CIFAR-10's test split
# where -p data_root or DIFFGEO_DATA holds it, else the recorded ones), into results/petrini_fig5_long_x4_measured.nc.
# Without that zoo, and with `-p stage train`, it is the training stage on the notebook's default profile (cpu), writing
# results/petrini_fig5.nc and figures/petrini_fig*.png under the repository, where the committed results live: its
# cells run as parallel jobs (one per core), a bar counts the finished networks, and each network's progress (which
# epoch) goes to its job's log under out/work/; add `-p executor inline` to run them one after the other with that
# progress printed here as plain lines. DIFFGEO_DRY_RUN=1 prints the stage and the papermill command, and runs nothing.
#   bash scripts/reproduce.sh -p stage train
# Extra arguments go to papermill (`--help-notebook` lists the notebook's parameters). A smoke run writes under
# out/smoke/ instead, never over the committed results:
#   bash scripts/reproduce.sh -p profile smoke
# A list is written out, in quotes, or passed as YAML with -y; a yes-or-no parameter takes True/False or yes/no:
#   bash scripts/reproduce.sh -p profile smoke -p seeds "[0, 1]" -p rerun yes
#   bash scripts/reproduce.sh -p profile smoke -y "seeds: [0, 1]"
# Another data set than the profile's writes files of its own (here results/petrini_fig5_cifar10.nc):
#   bash scripts/reproduce.sh -p dataset cifar10 -p data_root /path/to/data
# Another experiment notebook, by its name under nbs/ (the names are listed when FLAGSHIP names none):
#   FLAGSHIP=petrini_fig1 bash scripts/reproduce.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
nb="${FLAGSHIP:-fig5}"
nb="${nb%.ipynb}"; nb="${nb#nbs/}"
if [ ! -f "nbs/$nb.ipynb" ] || ! grep -q '"parameters"' "nbs/$nb.ipynb"; then
  names=$(grep -l '"parameters"' nbs/*.ipynb | sed 's|^nbs/||; s|\.ipynb$||' | grep -vx template | paste -sd ' ' -)
  echo "reproduce.sh: FLAGSHIP=$nb names no experiment notebook (nbs/$nb.ipynb with a parameters cell); they are: $names" >&2
  exit 2
fi
source "$root/scripts/setup.sh"
for arg in "$@"; do   # the notebook's parameters, and nothing run
  if [ "$arg" = --help-notebook ]; then exec papermill "nbs/$nb.ipynb" --help-notebook; fi
done
# which stage, and why, in one line; the measuring stage's parameters go before the ones given (`Experiment.main_job`)
mapfile -t decided < <(python - "$nb" "$@" <<'EOF'
import shlex, sys
from diffgeo import scaffold
found = [e for e in scaffold.experiments() if e.notebook == f"{sys.argv[1]}.ipynb"]
extra, line = found[0].main_job(sys.argv[2:]) if found else ([], f"reproduce.sh: nbs/{sys.argv[1]}.ipynb as its parameters say")
print(line); print(shlex.join(extra))
EOF
)
[ "${#decided[@]}" -eq 2 ] || { echo "reproduce.sh: could not decide the stage (see the error above)" >&2; exit 2; }
echo "${decided[0]}"
eval "stage=(${decided[1]})"
if [ -n "${DIFFGEO_DRY_RUN:-}" ]; then   # say what would run, run nothing
  echo "papermill nbs/$nb.ipynb out/$nb.ipynb -k python3 --log-output ${stage[*]} $*"; exit 0
fi
mkdir -p out
start=$(date +%s)
status=0
DIFFGEO_PROGRESS_INTERVAL="${DIFFGEO_PROGRESS_INTERVAL:-20}" papermill "nbs/$nb.ipynb" "out/$nb.ipynb" -k python3 --log-output \
  "${stage[@]}" "$@" || status=$?
if [ "$status" != 0 ]; then
  # the error that stopped the notebook, once more as the last line (papermill's own traceback comes before it)
  python - "out/$nb.ipynb" "$start" <<'EOF' >&2 || true
import json, os, sys
path, start = sys.argv[1], int(sys.argv[2])
if not os.path.exists(path) or os.path.getmtime(path) < start: sys.exit()   # papermill stopped before the notebook ran
for cell in json.load(open(path))["cells"]:
    for o in cell.get("outputs", []):
        if o.get("output_type") == "error":
            sys.exit(print(f"reproduce.sh: {path} stopped: {o['ename']}: {o['evalue']}"))
EOF
  exit "$status"
fi
echo "Executed notebook: out/$nb.ipynb (the files it wrote are listed at the end of its run cell)"
