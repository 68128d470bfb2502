"""Does a faster training setting train as well as float32? Short trainings of the Petrini zoo on CIFAR-10, in float32
(NCHW) and in each candidate setting, on the same seeds, side by side in one process (one torch thread, as the long runs train): the validation error each reaches
and the time per step. The decision `diffgeo.train.FAST_CPU` records comes from this script's output.

Usage (the data folder holds CIFAR-10; see ../shared/data/README.md):

    DIFFGEO_DATA=/path/to/data OMP_NUM_THREADS=1 python bench/train_precision.py
    DIFFGEO_DATA=/path/to/data OMP_NUM_THREADS=1 python bench/train_precision.py --archs ResNet18 --seeds 0 1 2 --epochs 3

What is run: `petrini.setup` and `petrini.train_network` (the paper's recipe, App. E.1: SGD 0.1, cosine, crops and
flips; Adam for the fully connected nets) on P training images (default 10,000) for `--epochs` epochs, at the long
profiles' widths (`petrini.LONG_WIDTH`), each seed once per setting; then the validation error on 5,000 held-out images,
always evaluated in float32. A setting "trains as well" where its mean validation error is within the seeds' spread of
float32's: |Δ| ≤ 2 s.e. of the difference (the s.d. of the per-seed differences over √n, paired by seed) or 1 point.
"""
import argparse
import math
import sys
import time

import numpy as np
import torch

from _common import machine
from diffgeo import train
from diffgeo.experiments import petrini

SETTINGS = {"fp32": dict(amp=None, memory_format="contiguous"), "bf16": dict(amp="bf16", memory_format="contiguous"),
            "fp32 NHWC": dict(amp=None, memory_format="channels_last"), "bf16 NHWC": dict(amp="bf16", memory_format="channels_last")}


def one(arch, seed, P, epochs, setting):
    s = petrini.setup(arch, seed, "cifar10", P=P, n_val=5000, n_test=10, width=petrini.LONG_WIDTH.get(arch, 1.0))  # on the CPU (the default context)
    steps = epochs * math.ceil(P / 128)
    t0 = time.perf_counter()
    res, _ = petrini.train_network(s.net, s.info.name, "cifar10", s.data, s.fit, s.val, steps, seed, warmup=0.05,
                                   progress=False, **SETTINGS[setting])
    seconds = time.perf_counter() - t0
    return train.evaluate(res.model, s.val)["error"], seconds / steps


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--archs", nargs="+", default=["ResNet18", "VGG11", "AlexNet", "LeNet"])
    p.add_argument("--settings", nargs="+", default=["bf16"], help=f"candidates against fp32, of {list(SETTINGS)}")
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument("--P", type=int, default=10_000)
    p.add_argument("--epochs", type=int, default=3)
    args = p.parse_args()
    print(machine())
    print(f"P = {args.P}, {args.epochs} epochs, seeds {args.seeds}; validation error on 5,000 images, evaluated in float32\n")
    print(f"{'network':<16}{'setting':>10}{'val. error (mean ± s.d.)':>28}{'Δ vs fp32':>12}{'2 s.e.':>9}{'ms/step':>9}{'speed-up':>9}  same?")
    for arch in args.archs:
        rows = {}
        for name in ["fp32", *args.settings]:
            out = [one(arch, s, args.P, args.epochs, name) for s in args.seeds]
            rows[name] = (np.array([o[0] for o in out]), np.array([o[1] for o in out]))
            print(f"  done {arch} {name}", file=sys.stderr, flush=True)
        ref, tref = rows["fp32"]
        for name, (err, t) in rows.items():
            d = err - ref
            se2 = 2 * d.std(ddof=1) / math.sqrt(len(d)) if len(d) > 1 else math.nan
            same = "" if name == "fp32" else "yes" if abs(d.mean()) <= max(se2, 0.01) else "NO"
            print(f"{arch:<16}{name:>10}{100 * err.mean():>20.1f} ± {100 * err.std(ddof=1):.1f} %"
                  f"{'' if name == 'fp32' else f'{100 * d.mean():+.1f}':>12}{'' if name == 'fp32' else f'{100 * se2:.1f}':>9}"
                  f"{1e3 * t.mean():>9.0f}{tref.mean() / t.mean():>8.2f}x  {same}", flush=True)


if __name__ == "__main__":
    main()
