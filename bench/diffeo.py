"""Benchmark diffgeo's batched diffeomorphisms against the authors' reference implementation.

Usage:

    git clone https://github.com/pcsl-epfl/diffeomorphism /path/to/diffeomorphism   # outside this repo
    python bench/diffeo.py --ref /path/to/diffeomorphism      # or set DIFFEO_REF=/path/to/diffeomorphism
    python bench/diffeo.py --ref /path/to/diffeomorphism --quick   # fewer repeats

    python bench/diffeo.py                                    # ours against the floor only

What is measured (CPU, float32, torch's default number of threads; numba's for the compiled path):

- floor: a bare `F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True)`
  of the same batch, with the grid of the same kind of deformation computed beforehand: the least
  any warp of these images must do (one bilinear read per output pixel). Gaussian interpolation
  reads 36 pixels per output, as much as nine of these;
- ours: `diffgeo.diffeo.deform(x, T, c, interp, cutoff="code")` on a batch `x` [B, C, H, W],
  one random field per image, in one call (drawing the fields included). Gaussian interpolation
  takes the compiled path (numba, one pass) when numba is installed;
- torch path (Gaussian only): the same call with `diffgeo.maps.COMPILED = False` (what
  DIFFGEO_DIFFEO=torch does), the nine weighted `grid_sample` calls, timed in the same run;
- reference: `diff.deform(img, T, c, interp)` from pcsl-epfl/diffeomorphism, which draws one field
  per call, looped over the images and stacked.

All are timed in the same run, so that their ratios are comparable; the floor and our variants are
called in turn within each round of repeats, so that they see the same machine state (the floor
alone moved 267k-376k img/s at 32 px between runs). Absolute throughputs on a shared machine vary
by tens of percent from run to run, their ratios less.

Both use c = 3 and the temperature giving an expected displacement of one pixel, and the reference's
cut-off sqrt(i²+j²) < c + 1/2 (our `cutoff="code"`); the reference's 'linear' is our 'bilinear'.
Each timing is the best of a few repeats after a warm-up call (best rather than median, as it is
the least sensitive to other load on the machine), reported as images per second.
The reference Gaussian interpolation is O(n⁴) per image, so it is timed on a subset of the images,
and skipped when its [n, n, n, n] intermediates would not fit in the available memory.

A sanity check first applies the SAME field with both implementations (`diffgeo.diffeo.warp` and the
reference `diff.remap`, which takes pixel displacements dx = W τ_u, dy = H τ_v) and prints the max
absolute difference, for bilinear (32×32) and Gaussian (16×16) interpolation.
"""
import argparse
import os
import sys
import warnings

import torch
import torch.nn.functional as F

import diffgeo.diffeo as dd
import diffgeo.maps as maps
from _common import best_time, best_times, load_reference, machine

C_CUT, DELTA = 3, 1.0
CASES = [(1000, 3, 32), (16, 3, 224)]              # (B, C, n)
REF_SUBSET = {(32, "gaussian"): 20, (224, "gaussian"): 2}


def available_bytes():
    with open("/proc/meminfo") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("MemAvailable"))


def sanity_check(diff):
    print("Sanity check: same field, ours (warp) vs reference (remap), max |difference|")
    for interp, ref_interp, n in [("bilinear", "linear", 32), ("gaussian", "gaussian", 16)]:
        for dtype in (torch.float32, torch.float64):
            B, C = 8, 3
            x = torch.rand(B, C, n, n, dtype=dtype)
            T = dd.temperature_for_delta(DELTA, n, C_CUT, cutoff="code")
            tau = dd.field(dd.sample_coefficients(B, T, C_CUT, cutoff="code", dtype=dtype), (n, n))
            disp = dd.displacement(tau)
            ours = dd.warp(x, tau, interp)
            ref = torch.stack([diff.remap(x[b], disp[b, 0], disp[b, 1], ref_interp) for b in range(B)])
            print(f"  {interp:8s} {B}x{C}x{n}x{n} {str(dtype):13s}: {(ours - ref).abs().max().item():.2e}")
    print()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ref", default=os.environ.get("DIFFEO_REF"), help="path of a clone of pcsl-epfl/diffeomorphism (none: floor only)")
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    args = p.parse_args()
    diff = load_reference(args.ref, "diffeo.py") if args.ref else None
    warnings.filterwarnings("ignore", message="torch.meshgrid")  # emitted by the reference's scalar_field_modes
    ours_reps, ref_reps = (2, 1) if args.quick else (30, 3)

    print(machine())
    print(f"c = {C_CUT}, T for delta = {DELTA} px (cutoff='code'), float32, best of {ours_reps} (ours) / "
          f"{ref_reps} (reference) repeats after a warm-up\n")
    if diff is not None: sanity_check(diff)

    rows = []
    for B, C, n in CASES:
        T = dd.temperature_for_delta(DELTA, n, C_CUT, cutoff="code")
        x = torch.rand(B, C, n, n)
        tau = dd.field(dd.sample_coefficients(B, T, C_CUT, cutoff="code"), (n, n))
        px, py = dd._positions(dd.displacement(tau))
        grid = torch.stack((px * (2 / (n - 1)) - 1, py * (2 / (n - 1)) - 1), -1)
        def run(interp, compiled=True):
            def call():
                maps.COMPILED = compiled
                try: return dd.deform(x, T, C_CUT, interp, cutoff="code")
                finally: maps.COMPILED = True
            return call
        # the floor and every variant of ours in turn within each round: their ratios see the same machine state
        times = best_times([lambda: F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=True),
                            run("bilinear"), run("gaussian"), run("gaussian", compiled=False)], ours_reps)
        floor, ours_of, torch_path_of = B / times[0], {"bilinear": B / times[1], "gaussian": B / times[2]}, {"gaussian": B / times[3]}
        for interp, ref_interp in [("bilinear", "linear"), ("gaussian", "gaussian")]:
            case = f"{B}x{C}x{n}x{n}"
            ours, torch_path = ours_of[interp], torch_path_of.get(interp)
            k = min(B, REF_SUBSET.get((n, interp), B))
            note = "" if k == B else f"reference timed on {k} images"
            # peak of the reference Gaussian: about (3 + C) float32 tensors of n⁴ elements
            need = (3 + C) * n**4 * 4
            if diff is None: ref, note = None, "no reference given"
            elif interp == "gaussian" and need > 0.8 * available_bytes():
                ref, note = None, (f"reference skipped: needs ~{need / 2**30:.0f} GiB ([{n}]*4 tensors), "
                                   f"{available_bytes() / 2**30:.0f} GiB available")
            else:
                xs = x[:k]
                ref = k / best_time(lambda: torch.stack([diff.deform(img, T, C_CUT, ref_interp) for img in xs]), ref_reps)
            rows.append((case, interp, floor, ours, torch_path, ref, note))
            print(f"  done {case} {interp}", file=sys.stderr, flush=True)

    print(f"{'case':<14} {'interp':<9} {'floor img/s':>12} {'ours img/s':>12} {'ours/floor':>11} {'torch img/s':>12} "
          f"{'torch/floor':>12} {'ref img/s':>10} {'ours/ref':>9}  note")
    for case, interp, floor, ours, torch_path, ref, note in rows:
        r, ratio = ("—", "—") if ref is None else (f"{ref:.1f}", f"{ours / ref:.1f}x")
        t, t_cost = ("—", "—") if torch_path is None else (f"{torch_path:.1f}", f"{floor / torch_path:.2f}x")
        print(f"{case:<14} {interp:<9} {floor:>12.1f} {ours:>12.1f} {floor / ours:>10.2f}x {t:>12} {t_cost:>12} {r:>10} {ratio:>9}  {note}")
    print("\nours/floor: our time over one bare grid_sample's (1 is the floor; Gaussian reads 36 pixels per output, the\n"
          "torch path's nine weighted grid_samples). torch: the PyTorch path of Gaussian interpolation (COMPILED = False).")


if __name__ == "__main__":
    main()
