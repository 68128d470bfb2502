#!/usr/bin/env bash
# The main job: run the flagship experiment notebook (Petrini et al.'s Fig. 5) through papermill on its default
# profile (cpu) and write results/petrini_fig5.nc and figures/petrini_fig*.png under the repository, where the
# committed results live. Its cells run as parallel jobs (one per core): a bar counts the finished networks, and each
# network's progress (which epoch) goes to its job's log under out/work/; add `-p executor inline` to run them one
# after the other with that progress printed here as plain lines.
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
mkdir -p out
start=$(date +%s)
status=0
DIFFGEO_PROGRESS_INTERVAL="${DIFFGEO_PROGRESS_INTERVAL:-20}" papermill "nbs/$nb.ipynb" "out/$nb.ipynb" -k python3 --log-output "$@" ||
  status=$?
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
