"""Benchmark diffgeo's R_f measurement against the reference route and against the floor.

Usage:

    git clone https://github.com/pcsl-epfl/diffeomorphism /path/to/diffeomorphism   # outside this repo
    python bench/stability.py --ref /path/to/diffeomorphism     # or set DIFFEO_REF=/path/to/diffeomorphism
    python bench/stability.py --ref ... --n 500 --repeats 3 --device cuda

The task: R_f of a ResNet18 (CIFAR stem, at initialisation, so batch-norm uses batch statistics)
on n = 500 images of 3x32x32, one diffeomorphism and one noise draw per image, c = 3, delta = 1,
bilinear interpolation, the code's cut-off. The images are CIFAR-10 test images when
DIFFGEO_DATA (or --data-root) holds cifar10_jpeg.npz / cifar10.npz, otherwise uniform noise
(the timings do not depend on the pixel values).

Three timings, each the best of --repeats runs after a warm-up, in one process:

- ours:      `stability.relative_stability(net, x, perturbation=stability.Diffeomorphism(delta=1, c=3, cutoff="code"), batch_size=B)`,
             everything included (drawing fields and noise, warping, forward passes, distances);
- reference: the authors' route: `diff.deform(img, T, c)` of pcsl-epfl/diffeomorphism looped over
             the images, per-sample noise, then batched forward passes of x, tau x, x + eta and of
             the shuffled images z for the normaliser, and the same medians;
- floor:     the bare forward passes the measure cannot avoid: f(x), f(tau x), f(x + eta) in the same
             batches (the normaliser reuses f(x), so it needs no pass of its own).

Printed: seconds per run for each, reference / ours, and ours / floor (target: <= 1.25).
"""
import argparse
import os

import torch

from _common import best_time, load_reference, machine
from diffgeo import data, diffeo, models, probes, stability

C_CUT, DELTA = 3, 1.0


def images(n, root):
    try:
        ds = data.load("cifar10", root=root)
        return ds.test.subset(n, seed=0).images, "CIFAR-10 test images"
    except (FileNotFoundError, ValueError, TypeError):
        return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(0)), "uniform noise images"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ref", default=os.environ.get("DIFFEO_REF"), help="path to a clone of pcsl-epfl/diffeomorphism")
    ap.add_argument("--n", type=int, default=500, help="test images")
    ap.add_argument("--batch-size", type=int, default=250, help="images per forward pass")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--data-root", default=None, help="folder with cifar10_jpeg.npz (default: $DIFFGEO_DATA)")
    args = ap.parse_args()
    diff = load_reference(args.ref, "stability.py")
    dev = torch.device(args.device)
    print(machine(dev))
    torch.manual_seed(0)
    net = models.build("ResNet18", in_channels=3, n_classes=10, size=32).to(dev)
    x, what = images(args.n, args.data_root)
    x = x.to(dev)
    B, bs = len(x), args.batch_size
    T = diffeo.temperature_for_delta(DELTA, 32, C_CUT, cutoff="code")
    print(f"ResNet18 at init, {B} x 3x32x32 ({what}), c = {C_CUT}, delta = {DELTA} (T = {T:.3g}), batch {bs}, "
          f"device {dev}, torch {torch.__version__}, {torch.get_num_threads()} threads")

    def ours():
        return stability.relative_stability(net, x, perturbation=stability.Diffeomorphism(delta=DELTA, c=C_CUT, cutoff="code"), batch_size=bs, seed=0).R_f.item()

    def forward_all(*inputs):
        with torch.no_grad(), probes.probing(net):
            return [torch.cat([net(v[i:i + bs]) for i in range(0, B, bs)]) for v in inputs]

    g = torch.Generator().manual_seed(0)
    xt_fixed = diffeo.deform(x, T, C_CUT, cutoff="code", generator=g)
    eta_fixed = stability.sphere_noise(x.shape, (xt_fixed - x).flatten(1).norm(dim=1), g).to(dev)

    def floor():
        forward_all(x, xt_fixed, x + eta_fixed)

    def reference():
        torch.manual_seed(0)
        xc = x.cpu()
        xt = torch.stack([diff.deform(img, T, C_CUT) for img in xc]).to(dev)
        r = (xt - x).flatten(1).norm(dim=1)
        eta = torch.randn_like(x)
        eta = eta / eta.flatten(1).norm(dim=1).view(-1, 1, 1, 1) * r.view(-1, 1, 1, 1)
        z = x[torch.randperm(B, device=dev)]
        f, ft, fn, fz = forward_all(x, xt, x + eta, z)
        sq = lambda a, b: (a - b).pow(2).sum(1)
        return (sq(ft, f).median() / sq(fn, f).median()).item(), (sq(f, fz).median()).item()

    t_ours, t_ref, t_floor = best_time(ours, args.repeats), best_time(reference, args.repeats), best_time(floor, args.repeats)
    print(f"ours      {t_ours:8.3f} s   (R_f = {ours():.3f})")
    print(f"reference {t_ref:8.3f} s   (R_f = {reference()[0]:.3f})")
    print(f"floor     {t_floor:8.3f} s   (3 forward passes of {B} images)")
    print(f"reference / ours = {t_ref / t_ours:.2f}x;  ours / floor = {t_ours / t_floor:.3f}x (target <= 1.25)")


if __name__ == "__main__":
    main()
