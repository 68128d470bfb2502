"""Compute the committed `cpu` datasets again by this checkout's code, and say how far each lies from the committed file.

    python scripts/regenerate.py                               # every committed cpu dataset (results/*.nc), into out/regenerate/
    python scripts/regenerate.py petrini_fig1 detlefsen_fig4   # some (the files' names, without .nc)
    python scripts/regenerate.py --list                        # which datasets, with the settings each is run with
    python scripts/regenerate.py petrini_fig1 --replace        # and copy the new dataset and figures over the committed ones
    python scripts/regenerate.py --executor inline             # every cell in this process, one after another (one core)

Each dataset is computed by its experiment's `main` at the profile, tag and settings its own provenance records
(`Experiment.rerun_arguments`), into OUT/<dataset>/ (results/, figures/ and its shards under work/), on one torch thread
unless OMP_NUM_THREADS says otherwise. The table gives its minutes and, over its variables (`results.compare`), the
largest absolute and relative difference to the committed file, NaNs that moved, and variables only one file has; it is
printed and written to OUT/regenerate.md, every variable's row to OUT/regenerate.csv. A CIFAR-10 dataset needs the data
folder (DIFFGEO_DATA). `--replace` refuses a checkout with uncommitted changes: the provenance must name the commit.
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # this checkout's diffgeo, wherever it is run from
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

from diffgeo import results  # noqa: E402
from diffgeo.scaffold import REGISTRY, experiments, regenerate  # noqa: E402


def committed_cpu() -> dict:
    "Every committed dataset of profile cpu: file stem -> path."
    found = {}
    for f in sorted((ROOT / "results").glob("*.nc")):
        if results.parameters(results.load_dataset(f)).get("profile") == "cpu": found[f.stem] = f
    return found


def fmt(x:float) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else "0" if x == 0 else f"{x:.2g}"


def summary(r:dict) -> dict:
    rows = r["rows"]
    num = [x for x in rows if not x["note"] and not math.isnan(x["max_abs"])]
    worst = max(num, key=lambda x: (x["max_rel"], x["max_abs"]), default=None)
    return {"dataset": r["dataset"], "minutes": f"{r['minutes']:.1f}", "variables": str(len(rows)),
            "largest relative difference": f"{worst['variable']}: {fmt(worst['max_rel'])} (abs. {fmt(worst['max_abs'])})" if worst else "–",
            "NaNs moved": str(sum(x["nan_moved"] for x in rows)),
            "in one file only": ", ".join(f"{x['variable']} ({x['note']})" for x in rows if x["note"]) or "–",
            "settings not brought back": ", ".join(r["arguments"]["unmatched"]) or "–"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("names", nargs="*", help="committed cpu datasets, by file name without .nc (default: all)")
    ap.add_argument("--out", default=str(ROOT / "out" / "regenerate"), help="where the runs write (default: out/regenerate)")
    ap.add_argument("--device", default="cpu", help="the runs' device (default: cpu)")
    ap.add_argument("--executor", choices=["inline", "local", "slurm"], help="how the cells run (default: the experiment's, "
                    "local jobs for a cpu sweep); inline: one after another in this process, beside a long job's core")
    ap.add_argument("--max-parallel", type=int, help="cells at once as local jobs (default: one per CPU core)")
    ap.add_argument("--list", action="store_true", help="list the datasets and their settings; compute nothing")
    ap.add_argument("--replace", action="store_true", help="copy each regenerated dataset and its figures over the committed ones")
    a = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    every = committed_cpu()
    unknown = [n for n in a.names if n not in every]
    if unknown:
        ap.error(f"no committed cpu dataset {unknown}; the committed ones are: {', '.join(every)}")
    chosen = {n: every[n] for n in (a.names or every)}
    if a.list:
        experiments()
        for n, f in chosen.items():
            ds = results.load_dataset(f)
            args = REGISTRY[ds.attrs["experiment"]].rerun_arguments(ds)
            print(f"{n}: {ds.attrs['experiment']}, profile {args['profile']}" + (f", tag {args['tag']}" if args["tag"] else "")
                  + (f", settings {args['overrides']}" if args["overrides"] else "")
                  + (f"; not brought back: {args['unmatched']}" if args["unmatched"] else "")
                  + f" (committed from {ds.attrs.get('git_commit', '?')[:7]}, {ds.attrs.get('start_time', '?')[:10]})")
        return 0
    if a.replace and subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
                                    capture_output=True, text=True).stdout.strip():
        ap.error("--replace needs a clean checkout (commit or stash the changes): the regenerated files record the commit")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    table, every_row = [], []
    for n, f in chosen.items():
        print(f"== {n}", flush=True)
        r = regenerate(f, out / n, device=a.device, executor=a.executor, max_parallel=a.max_parallel)
        table.append(summary(r))
        every_row += [{"dataset": n, **x} for x in r["rows"]]
        if a.replace:
            exp, args = REGISTRY[r["experiment"]], r["arguments"]
            new, old = exp.paths(args["profile"], out / n, args["tag"]), exp.paths(args["profile"], None, args["tag"])
            shutil.copyfile(new.dataset, old.dataset)
            for k, fig in new.figures.items(): shutil.copyfile(fig, old.figures[k])
            print(f"replaced {os.path.relpath(old.dataset, ROOT)} and {len(new.figures)} figures", flush=True)
    head = list(table[0])
    md = results.markdown_table([[t[h] for h in head] for t in table], header=head) + "\n"
    (out / "regenerate.md").write_text(md)
    with open(out / "regenerate.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(every_row[0])); w.writeheader(); w.writerows(every_row)
    print(md + f"\n(every variable: {out / 'regenerate.csv'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
