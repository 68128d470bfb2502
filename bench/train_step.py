"""Training-step time of the Petrini zoo on the CPU under each layout and precision `diffgeo.train.train` offers, side by
side in one process, and the training loop's time per step over the bare step.

Usage:

    OMP_NUM_THREADS=1 python bench/train_step.py             # one thread, as the long runs train
    OMP_NUM_THREADS=1 python bench/train_step.py --quick     # fewer repeats
    python bench/train_step.py --device cuda                 # on a GPU (layouts and bf16 there)
    python bench/train_step.py --archs ResNet18 VGG11

What is measured: the best wall-clock time of one optimiser step (crops and flips, forward, cross-entropy, backward,
SGD or Adam update as App. E.1 assigns) on a fixed batch of 128 CIFAR-10-shaped images, at the widths of the long
profiles (`petrini.LONG_WIDTH`), for

- reference: float32, NCHW weights and batches (PyTorch's default);
- NHWC: float32, channels-last weights and batches (`memory_format="channels_last"`);
- bf16: autocast to bfloat16, NCHW (`amp="bf16"`);
- bf16+NHWC: both;
- floor: the forward pass alone in the fastest of the four settings, without autograd (a step is about three forwards).

The four settings are timed in turn within each round of repeats, so that they see the same machine state; compare
the ratios between machines, not the milliseconds. Then `diffgeo.train.train` itself runs 2 epochs of 40 steps with
`train.fast_settings(arch)` (the choice `petrini.train_network` takes where `fast=True`), and its time per step is
printed over the bare step's in the same setting: the loop's own cost (data, augmentation, bookkeeping).

Whether a setting trains as well as float32 is not shown here (a step's time says nothing of it): see the notebook
`31_train`, *Faster training on the CPU*, for the short runs that decide it per architecture.
"""
import argparse
import copy
import sys
import time

import torch
import torch.nn.functional as F

from _common import best_times, machine
from diffgeo import data, models, train
from diffgeo.experiments import petrini

ARCHS = ["ResNet18", "VGG11", "EfficientNetB0", "AlexNet", "LeNet", "FullConnL4"]
SETTINGS = [("fp32 NCHW", None, "contiguous"), ("fp32 NHWC", None, "channels_last"),
            ("bf16 NCHW", "bf16", "contiguous"), ("bf16 NHWC", "bf16", "channels_last")]


def stepper(net, x, y, optimizer, amp, memory_format, device):
    "One optimiser step of `net` on (x, y) in the given precision and layout, as `train` takes it."
    opt = torch.optim.Adam(net.parameters(), 1e-4) if optimizer == "adam" else torch.optim.SGD(net.parameters(), 1e-2, momentum=0.9)
    cm = train.training_layout(net, device, memory_format)
    layout = cm.__enter__()                                     # left in that layout for the bench's lifetime
    g = torch.Generator().manual_seed(0)
    ac = torch.autocast(torch.device(device).type, dtype=torch.bfloat16) if amp else None

    def step():
        xb = layout(train.augment(x, g))
        opt.zero_grad(set_to_none=True)
        if ac is None: loss = F.cross_entropy(net(xb), y)
        else:
            with ac: out = net(xb)
            loss = F.cross_entropy(out.float(), y)
        loss.backward(); opt.step()

    def forward():
        with torch.no_grad():
            if ac is None: net(layout(x))
            else:
                with ac: net(layout(x))
    return step, forward


def loop_seconds(arch, width, device, steps=40):
    "Seconds per step of `train.train` over 2 epochs of `steps` steps each, in `train.fast_settings(arch)`."
    g = torch.Generator().manual_seed(0)
    n = 128 * steps
    split = data.Split(torch.randn(n, 3, 32, 32, generator=g), torch.randint(10, (n,), generator=g))
    net = models.build(arch, in_channels=3, n_classes=10, size=32, width=width).to(device)
    info = models.ARCHS[arch]
    kw = train.fast_settings(arch, device)
    train.train(net, split, epochs=1, optimizer=info.optimizer, progress=False, **kw)   # warm-up
    t0 = time.perf_counter()
    train.train(net, split, epochs=2, optimizer=info.optimizer, progress=False, **kw)
    if torch.device(device).type == "cuda": torch.cuda.synchronize()
    return (time.perf_counter() - t0) / (2 * steps), kw


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--archs", nargs="+", default=ARCHS, help=f"architectures (default: {' '.join(ARCHS)})")
    args = p.parse_args()
    if args.threads: torch.set_num_threads(args.threads)
    reps = 3 if args.quick else 8
    dev = torch.device(args.device)
    print(machine(dev))
    print(f"one optimiser step, batch 128, CIFAR-10 shapes, long-profile widths; best of {reps} rounds after a warm-up\n")
    head = "".join(f"{s[0]:>12}" for s in SETTINGS)
    print(f"{'network':<22}{'ref ms':>9}{head}{'floor ms':>9}{'chosen':>18}{'loop/bare':>11}")
    for arch in args.archs:
        arch = models.resolve_arch(arch)
        width = petrini.LONG_WIDTH.get(arch, 1.0)
        info = models.ARCHS[arch]
        torch.manual_seed(0)
        base = models.build(arch, in_channels=3, n_classes=10, size=32, width=width).train().to(dev)
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(128, 3, 32, 32, generator=g).to(dev), torch.randint(10, (128,), generator=g).to(dev)
        fns = [stepper(copy.deepcopy(base), x, y, info.optimizer, amp, mf, dev) for _, amp, mf in SETTINGS]
        times = best_times([f[0] for f in fns], reps)
        fastest = min(range(len(times)), key=times.__getitem__)
        t_floor = best_times([fns[fastest][1]], reps)[0]
        per_step, kw = loop_seconds(arch, width, dev)
        probe = models.build(arch, in_channels=3, n_classes=10, size=32, width=width)
        layout = "channels_last" if train.uses_channels_last(probe, dev, kw.get("memory_format", "auto")) else "contiguous"
        chosen = next(i for i, (_, amp, mf) in enumerate(SETTINGS) if amp == kw.get("amp") and mf == layout)
        cols = "".join(f"{times[0] / t:>11.2f}x" for t in times)
        print(f"{arch + f' x{width:g}':<22}{1e3 * times[0]:>9.1f}{cols}{1e3 * t_floor:>9.1f}{SETTINGS[chosen][0]:>18}"
              f"{per_step / times[chosen]:>10.2f}x", flush=True)
        print(f"  done {arch}", file=sys.stderr, flush=True)
    print("\ncolumns 2-5: speed-up over the reference (fp32 NCHW); > 1 is faster. floor: the forward pass alone in the fastest\n"
          "setting, no autograd. chosen: train.fast_settings (decided per architecture from the short training runs in\n"
          "31_train, not from this table alone); loop/bare: train()'s time per step over the bare step in that setting.")


if __name__ == "__main__":
    main()
