#!/usr/bin/env bash
# The main job: run the flagship experiment notebook (Petrini et al.'s Fig. 5) through papermill on its default
# profile (cpu) and write results/petrini_fig5.nc and figures/petrini_fig*.png under the repository, where the
# committed results live. Its cells run as parallel jobs (one per core): a bar counts the finished networks, and each
# network's progress (which epoch) goes to its job's log under out/work/; add `-p executor inline` to run them one
# after the other with that progress printed here as plain lines.
# Extra arguments go to papermill. A smoke run writes under out/smoke/ instead, never over the committed results:
#   bash scripts/reproduce.sh -p profile smoke
# Another experiment: FLAGSHIP=detlefsen_tab2 bash scripts/reproduce.sh
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
nb="${FLAGSHIP:-fig5}"
mkdir -p out
DIFFGEO_PROGRESS_INTERVAL="${DIFFGEO_PROGRESS_INTERVAL:-20}" papermill "nbs/$nb.ipynb" "out/$nb.ipynb" -k python3 --log-output "$@"
echo "Executed notebook: out/$nb.ipynb (the files it wrote are listed at the end of its run cell)"
