"""Benchmark the exact log volume element of a CIFAR-size input through the feature maps of a ResNet-18 (512 features)
and a ResNet-50 (2048 features): diffgeo's `riemann.log_volume_element` against the two ways of building the Jacobian
that a user of PyTorch would reach for.

Usage:

    python bench/riemann.py                 # both networks, float32 timings, float64 agreement on ResNet-18
    python bench/riemann.py --quick         # ResNet-18 only
    python bench/riemann.py --memory 2**28  # our memory budget in bytes (default 2**30)

The networks are diffgeo.models' CIFAR ResNets (3x3 stem, no max-pooling) with GELU in place of ReLU
(`zavatoneveth_fig3.gelu_resnet`), as
Zavatone-Veth et al. (§5.1) make them differentiable, at PyTorch's default initialisation, in eval mode, the feature
map being the input of the final linear layer. One input x ~ N(0, 1) of shape 1x3x32x32. Three ways to get the
Jacobian J (m x 3072), then the same float64 singular values and Σ log s_i:

- ours: `diffgeo.riemann.log_volume_element` (on the copy `diffgeo.probes.jacobian_ready` makes: batch norms as affine
  maps, activations keeping their derivative, channels-last convolutions; one forward pass, rows by batched
  vector-Jacobian products in chunks sized by a memory budget), with the SVD (`method="svd"`, the default) and with
  the Cholesky factor of the float64 Gram matrix (`method="cholesky"`, the SVD where it is ill-conditioned), and
  without that copy (`probes.jacobian_matrix` on the network itself: what `jacobian_ready` saves);
- (a) all rows at once, `torch.func.jacrev` (the paper's autograd route, "more than 80GB" for a ResNet-50 on their
  GPU). Where it would not fit in this machine's memory (ResNet-50), its time and memory are measured on chunks of
  rows with the same vmap and extrapolated linearly to all m rows (said in the output);
- (b) one vector-Jacobian product per row, `torch.autograd.functional.jacobian` (its default, vectorize=False);
- and the stochastic estimate `diffgeo.riemann.log_volume_estimate` (Lanczos quadrature, PROBES x STEPS products with
  the Gram matrix JJ^T, each one vjp and one jvp), with its standard error and its distance from the exact value.

Each measurement runs in a fresh subprocess, so that its peak resident memory (ru_maxrss) is its own; the memory
printed is that peak minus the same process's peak after building the network (the model's own memory left out).
Timings are wall-clock, one run each after a warm-up forward pass, with torch's threads as set by --threads.
"""
import argparse
import json
import math
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROBES, STEPS = 8, 30  # the stochastic estimate's Rademacher probes and Lanczos steps


def child(args):
    "Run one measurement in this process and print a JSON line."
    import warnings
    import torch
    from torch import nn
    from diffgeo.experiments.zavatoneveth_fig3 import gelu_resnet
    from diffgeo.probes import jacobian_matrix
    from diffgeo.riemann import feature_map, log_volume, log_volume_element, log_volume_estimate

    torch.set_num_threads(args.threads)
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    torch.manual_seed(0)
    model = gelu_resnet(args.net, 3, 10, 32)
    model.fc = nn.Identity()
    model = model.to(dtype).eval()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(1)).to(dtype)
    with torch.no_grad(): model(x)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    def run():
        "The measurement: the log volume element (NaN where not computed), the rows of a chunk, the estimate's error."
        if args.method in ("ours", "cholesky"):
            return log_volume_element(model, x, memory=args.memory, method="svd" if args.method == "ours" else "cholesky").item(), None, None
        if args.method == "plain":               # ours without probes.jacobian_ready: what that copy saves
            return log_volume(jacobian_matrix(feature_map(model), x, args.memory)).item(), None, None
        if args.method == "estimate":            # stochastic Lanczos quadrature, no Jacobian
            est, se = log_volume_estimate(model, x, probes=PROBES, steps=STEPS)
            return est.item(), None, se.item()
        if args.method == "jacrev":
            f = lambda z: model(z)[0]
            if args.rows:                        # a chunk of rows with jacrev's vmap, for extrapolation
                y, pull = torch.func.vjp(f, x)
                torch.func.vmap(pull)(torch.eye(y.shape[0], dtype=dtype)[:args.rows])
                return float("nan"), args.rows, None
            J = torch.func.jacrev(f)(x).reshape(-1, x.numel())
            return torch.linalg.svdvals(J.double()).log().sum().item(), None, None
        J = torch.autograd.functional.jacobian(lambda z: model(z)[0], x).reshape(-1, x.numel())
        return torch.linalg.svdvals(J.double()).log().sum().item(), None, None

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:   # the library's word on J's rank, for the report
        warnings.simplefilter("always")
        value, rows, err = run()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rank = next((w for w in ("rank unresolved", "degenerate metric") if any(str(c.message).startswith(w) for c in caught)), None)
    print(json.dumps(dict(seconds=seconds, mb=(peak - base) / 1024, value=value, rows=rows, err=err, rank=rank)))


def measure(net, method, dtype="float32", memory=2**30, rows=0, threads=2):
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--net", net, "--method", method, "--dtype", dtype,
           "--memory", str(memory), "--rows", str(rows), "--threads", str(threads)]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if out.returncode != 0: return dict(error=(out.stderr.strip().splitlines() or ["killed"])[-1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="ResNet-18 only")
    p.add_argument("--memory", type=lambda s: int(eval(s, {})), default=2**30, help="our memory budget in bytes")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--net", default="ResNet18", help=argparse.SUPPRESS)
    p.add_argument("--method", default="ours", help=argparse.SUPPRESS)
    p.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    p.add_argument("--rows", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child: return child(args)
    sys.path.insert(0, os.path.dirname(HERE))
    import torch
    sys.path.insert(0, HERE)
    from _common import cpu_model
    print(f"torch {torch.__version__}, {args.threads} threads (in each measuring process), CPU: {cpu_model()}, "
          f"our memory budget {args.memory / 2**20:.0f} MiB")
    nets = {"ResNet18": 512} if args.quick else {"ResNet18": 512, "ResNet50": 2048}
    for net, m in nets.items():
        print(f"\n{net} feature map, 3072 -> {m}, float32")
        ours = measure(net, "ours", memory=args.memory, threads=args.threads)
        chol = measure(net, "cholesky", memory=args.memory, threads=args.threads)
        plain = measure(net, "plain", memory=args.memory, threads=args.threads)
        loop = measure(net, "loop", threads=args.threads)
        if net == "ResNet18":
            a = measure(net, "jacrev", threads=args.threads)
            note = ""
        else:                               # too big for this machine: two chunks of rows, extrapolated linearly
            c1, c2 = measure(net, "jacrev", rows=64, threads=args.threads), measure(net, "jacrev", rows=128, threads=args.threads)
            if "error" in c1 or "error" in c2:
                a = dict(error=c1.get("error") or c2.get("error"))
            else:
                slope_s, slope_mb = (c2["seconds"] - c1["seconds"]) / 64, (c2["mb"] - c1["mb"]) / 64
                a = dict(seconds=c2["seconds"] + slope_s * (m - 128), mb=c2["mb"] + slope_mb * (m - 128), value=float("nan"))
            note = " (extrapolated from 64 and 128 rows)"
        est = measure(net, "estimate", threads=args.threads)
        for name, r in (("ours", ours), ("ours, method='cholesky'", chol), ("ours without jacobian_ready", plain), ("(a) jacrev, all rows" + note, a), ("(b) one row per backward", loop),
                        (f"stochastic estimate, {PROBES} probes x {STEPS} steps", est)):
            if "error" in r: print(f"  {name:45s} failed: {r['error']}")
            else: print(f"  {name:45s} {r['seconds']:8.2f} s  {r['mb'] / 1024:7.2f} GiB  log vol {r['value']:.6f}"
                        + {"rank unresolved": " (float32 cannot resolve J's rank here: a float64 Jacobian would)",
                           "degenerate metric": " (J loses rank)"}.get(r.get("rank"), ""))
        for label, o in (("ours", ours), ("ours (cholesky)", chol)):
            if "error" in o: continue
            for name, r in (("(a)", a), ("(b)", loop)):
                if "error" not in r:
                    print(f"  speed-up of {label} over {name}: {r['seconds'] / o['seconds']:.2f}x, "
                          f"memory ratio {r['mb'] / max(o['mb'], 1e-9):.1f}x")
        if "error" not in ours and "error" not in plain:
            print(f"  speed-up from probes.jacobian_ready: {plain['seconds'] / ours['seconds']:.2f}x")
        if "error" not in ours and "error" not in est and not (math.isfinite(est["value"]) and math.isfinite(ours["value"])
                                                                and est["err"] is not None and est["err"] > 0):
            print(f"  stochastic estimate: {est['value']} ± {est['err']}, the exact value {ours['value']}: nothing to compare "
                  "(a NaN estimate: its float32 products cannot resolve the bottom of the spectrum; -inf: J loses rank)")
        elif "error" not in ours and "error" not in est:
            print(f"  stochastic estimate: {est['value']:.3f} ± {est['err']:.3f} (standard error), off the exact value by "
                  f"{est['value'] - ours['value']:+.3f} ({abs(est['value'] - ours['value']) / est['err']:.1f} standard errors, "
                  f"{abs(est['value'] - ours['value']) / abs(ours['value']):.1e} relative); "
                  f"time {est['seconds'] / ours['seconds']:.2f}x ours")
    print("\nResNet18 in float64: agreement of ours with (b)")
    o64, b64 = measure("ResNet18", "ours", "float64", args.memory, threads=args.threads), measure("ResNet18", "loop", "float64", threads=args.threads)
    if "error" in o64 or "error" in b64: print("  failed:", o64.get("error") or b64.get("error"))
    elif not (math.isfinite(o64["value"]) and math.isfinite(b64["value"])) or b64["value"] == 0:
        print(f"  ours {o64['value']}, (b) {b64['value']}: no relative difference to take")
    else: print(f"  ours {o64['value']:.12f}, (b) {b64['value']:.12f}, relative difference "
                f"{abs(o64['value'] - b64['value']) / abs(b64['value']):.1e}")


if __name__ == "__main__":
    main()
