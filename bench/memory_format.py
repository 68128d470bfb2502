"""One training step of the papers' convolutional networks in PyTorch's default layout (NCHW) and in the channels-last
layout (NHWC) that `diffgeo.train.train` takes on the CPU for those without batch norm (`memory_format="auto"`), side
by side in one process.

Usage:

    OMP_NUM_THREADS=1 python bench/memory_format.py            # one thread, as the long runs train
    python bench/memory_format.py --quick                      # fewer repeats
    python bench/memory_format.py --threads 2

What is measured (CPU, float32): the best wall-clock time of one optimiser step (forward, cross-entropy, backward,
update: `train`'s step, with the optimiser each experiment uses) on a fixed random batch, for

- reference: the network and its batch in NCHW, PyTorch's default (`memory_format="contiguous"`);
- ours: the network's 4-D weights and its batch channels-last (`memory_format="channels_last"`; "auto" picks it on the
  CPU for the networks without batch norm, whose NHWC kernel is much less accurate: see `diffgeo.train`, *Memory layout*);
- floor: the forward pass alone, channels-last, without autograd: the least a step can cost (a step also runs the
  backward pass, about twice the forward's work).

The three are timed in turn within each round of repeats, so that they see the same machine state; the ratios are
what to compare between machines. A check first runs one step of each layout from the same weights and prints the
largest difference of the updated weights over the largest change of a weight in the step (|dw|/|step|; the same
seed before each, so the same dropout masks on 2-D activations). Adam's first step divides by the gradient's size, so
weights with a gradient near zero move by percents of the step between the layouts; with SGD the column is the
gradients' difference, 1e-8 to 1e-4 here except for ResNet18, percents: its NHWC batch norm is the less accurate
kernel, and its gradient at initialisation moves by percents under any 1e-6 change (ReLUs flip).
"""
import argparse
import copy
import sys

import torch
import torch.nn.functional as F

from _common import best_times, machine
from diffgeo import models
from diffgeo.experiments import detlefsen_tab2

# (name, builder, input shape, batch, optimiser): the networks of the long runs and of fig5
CASES = [
    ("ResNet18 x1/8, CIFAR-10 (petrini)", lambda: models.build("ResNet18", in_channels=3, n_classes=10, size=32, width=0.125), (3, 32, 32), 128, "sgd"),
    ("EfficientNetB0 x1/8 (petrini)", lambda: models.build("EfficientNetB0", in_channels=3, n_classes=10, size=32, width=0.125), (3, 32, 32), 128, "sgd"),
    ("VGG11 x1/4 (petrini)", lambda: models.build("VGG11", in_channels=3, n_classes=10, size=32, width=0.25), (3, 32, 32), 128, "sgd"),
    ("LeNet (petrini)", lambda: models.build("LeNet", in_channels=3, n_classes=10, size=32), (3, 32, 32), 128, "sgd"),
    ("CNN, 42x42 (detlefsen)", lambda: detlefsen_tab2.build("CNN"), (1, 42, 42), 100, "adam"),
    ("ST-Affine CNN (detlefsen)", lambda: detlefsen_tab2.build("ST-Affine CNN"), (1, 42, 42), 100, "adam"),
    ("ST-CPAB CNN (detlefsen)", lambda: detlefsen_tab2.build("ST-CPAB CNN"), (1, 42, 42), 100, "adam"),
]


def stepper(net, x, y, optimizer, nhwc):
    if nhwc:
        net = net.to(memory_format=torch.channels_last); x = x.to(memory_format=torch.channels_last)
    opt = torch.optim.Adam(net.parameters(), 1e-4) if optimizer == "adam" else torch.optim.SGD(net.parameters(), 1e-2, momentum=0.9)
    def step():
        opt.zero_grad(set_to_none=True); F.cross_entropy(net(x), y).backward(); opt.step()
    return step, net


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = p.parse_args()
    if args.threads: torch.set_num_threads(args.threads)
    reps = 3 if args.quick else 10
    print(machine())
    print(f"one optimiser step, float32, best of {reps} rounds after a warm-up\n")
    print(f"{'network':<36} {'batch':>5} {'NCHW ms':>9} {'NHWC ms':>9} {'floor ms':>9} {'NCHW/NHWC':>10} {'NHWC/floor':>11} {'|dw|/|step|':>12}")
    for name, build, shape, batch, optimizer in CASES:
        torch.manual_seed(0)
        base = build().train()
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(batch, *shape, generator=g), torch.randint(10, (batch,), generator=g)
        # the check: one step from the same weights in each layout (the same seed before each)
        (s1, n1), (s2, n2) = stepper(copy.deepcopy(base), x, y, optimizer, False), stepper(copy.deepcopy(base), x, y, optimizer, True)
        torch.manual_seed(1); s1(); torch.manual_seed(1); s2()          # the same seed before each
        step = max((a - w).abs().max().item() for a, w in zip(n1.parameters(), base.parameters()))
        dw = max((a - b).abs().max().item() for a, b in zip(n1.parameters(), n2.parameters())) / step
        ref, _ = stepper(copy.deepcopy(base), x, y, optimizer, False)
        ours, net = stepper(copy.deepcopy(base), x, y, optimizer, True)
        xl = x.to(memory_format=torch.channels_last)
        def floor():
            with torch.no_grad(): net(xl)
        t_ref, t_ours, t_floor = best_times([ref, ours, floor], reps)
        print(f"{name:<36} {batch:>5} {1e3 * t_ref:>9.1f} {1e3 * t_ours:>9.1f} {1e3 * t_floor:>9.1f} {t_ref / t_ours:>9.2f}x "
              f"{t_ours / t_floor:>10.2f}x {dw:>12.1e}", flush=True)
        print(f"  done {name}", file=sys.stderr, flush=True)
    print("\nNCHW/NHWC > 1: the channels-last step is faster. floor: the forward pass alone (no autograd), channels-last.\n"
          "train's memory_format='auto' takes NHWC on the CPU only for the networks without batch norm (its NHWC kernel is\n"
          "the less accurate): here all but ResNet18 and EfficientNetB0.")


if __name__ == "__main__":
    main()
