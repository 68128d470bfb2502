#!/usr/bin/env bash
# The main job: run the flagship experiment notebook through papermill on its embedded
# default (profile=cpu) and write its dataset (data/) and figure (figures/).
# Extra arguments go to papermill, e.g. `bash scripts/reproduce.sh -p profile smoke`.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
source "$root/scripts/setup.sh"
cd "$root"
nb="${FLAGSHIP:-fig5}"
mkdir -p out
papermill "nbs/$nb.ipynb" "out/$nb.ipynb" -k python3 "$@"
echo "Wrote data/$nb.nc and figures/$nb.png (executed notebook: out/$nb.ipynb)"
