"""Benchmark `stripe.gradient_flow` against its previous implementation (the reference) and against the floor.

Usage:

    OMP_NUM_THREADS=1 python bench/bench_stripe_flow.py                    # P = 1024, 4096; h = 1000; 200 steps
    OMP_NUM_THREADS=1 python bench/bench_stripe_flow.py --P 1024 --steps 50 --repeats 2

The task: a `StripeNet` of d = 30 inputs, h = 1000 hidden units and α = 1e-3 (the paper's Fig. 7 settings) trained on
P stripe-model points for a fixed number of steps of the adaptive descent (far from a margin of 1, so that every step
is taken), single-threaded, float64. Three timings per P, each the best of --repeats runs after a warm-up, in one
process:

- reference: the implementation `gradient_flow` had before (`reference_gradient_flow` of tests/test_stripe.py): autograd on
             F = α(f_w − f_w0), the initial network's forward pass recomputed at every trial step;
- ours:      `stripe.gradient_flow`: f_w0 cached once, the gradient by hand from the trial step's own activations, its
             second product as ([x, 1] c)ᵀ 1[a > 0] ([d + 1, P] × [P, h], reading the activations row by row);
- before:    the same with that product as 1[a > 0]ᵀ ([x, 1] c) ([h, P] × [P, d + 1]), as it was until the layout change
             (`stripe._gradient` swapped for the old one in this process);
- floor:     the two matrix products per step no implementation of this algorithm avoids: the hidden layer's
             x Wᵀ ([P, d] × [d, h], `torch.addmm` into a buffer) and the gradient's ([x, 1] c)ᵀ a ([d + 1, P] × [P, h]).

All three implementations are also checked to take the same steps and end at the same weights (to float64 rounding;
ours and before bit for bit where the two products sum alike, as on the CPUs tried).
Printed: seconds per step of each, reference / ours, before / ours, and ours / floor.
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import best_times  # noqa: E402
from diffgeo import results, stripe  # noqa: E402


# the reference: the previous `gradient_flow`, kept once, as the oracle of tests/test_stripe.py
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests"))
from test_stripe import reference_gradient_flow  # noqa: E402


def _gradient_before(a, c, x1, beta):
    "`stripe._gradient` before the layout change: the second product as 1[a > 0]ᵀ ([x, 1] c)."
    g_beta = a.t().mv(c)
    g = a.sign_().t().mm(x1 * c[:, None])
    d = x1.shape[1] - 1
    return beta[:, None] * g[:, :d] / math.sqrt(d), beta * g[:, d], g_beta


def before_gradient_flow(*args, **kwargs):
    "`stripe.gradient_flow` with the former `_gradient`."
    ours, stripe._gradient = stripe._gradient, _gradient_before
    try: return stripe.gradient_flow(*args, **kwargs)
    finally: stripe._gradient = ours


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--P", type=int, nargs="+", default=[1024, 4096])
    ap.add_argument("--h", type=int, default=1000)
    ap.add_argument("--d", type=int, default=30)
    ap.add_argument("--alpha", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(1)
    print(f"gradient_flow, d = {a.d}, h = {a.h}, alpha = {a.alpha}, {a.steps} steps, float64, 1 thread; "
          f"{results.processor(torch.device('cpu'))}, torch {torch.__version__}")
    for P in a.P:
        x, y = stripe.stripe_data(P, a.d, seed=0)
        make = lambda: stripe.StripeNet(a.d, a.h, a.alpha, generator=torch.Generator().manual_seed(1000))
        out = {}
        def run(name, flow):
            def go():
                net = make()
                out[name] = (flow(net, x, y, max_steps=a.steps), net.W.detach().clone())
            return go
        W, b = make().W.detach(), make().b.detach()
        buf, x1, c = torch.empty(P, a.h, dtype=torch.float64), torch.cat([x, torch.ones(P, 1, dtype=torch.float64)], 1), y.clone()
        def floor():
            for _ in range(a.steps):
                torch.addmm(b, x, W.t(), out=buf)
                (x1 * c[:, None]).t().contiguous().mm(buf)
        t_ref, t_ours, t_before, t_floor = best_times([run("reference", reference_gradient_flow), run("ours", stripe.gradient_flow),
                                                       run("before", before_gradient_flow), floor], a.repeats)
        (r_ref, W_ref), (r_ours, W_ours), (r_before, W_before) = out["reference"], out["ours"], out["before"]
        assert r_ref["steps"] == r_ours["steps"] == r_before["steps"] == a.steps, (r_ref, r_ours, r_before)
        dW = ((W_ref - W_ours).abs().max() / (W_ref - make().W0).abs().max()).item()
        same = "bit for bit" if torch.equal(W_ours, W_before) else \
            f"to {((W_ours - W_before).abs().max() / (W_ours - make().W0).abs().max()).item():.1e} of their displacement"
        per = lambda t: 1e3 * t / a.steps
        print(f"P = {P:5d}: reference {per(t_ref):7.2f} ms/step, before {per(t_before):7.2f}, ours {per(t_ours):7.2f}, "
              f"floor {per(t_floor):7.2f}; reference/ours {t_ref / t_ours:.2f}, before/ours {t_before / t_ours:.2f}, "
              f"ours/floor {t_ours / t_floor:.2f}; same {a.steps} steps, weights differ from the reference's by {dW:.1e} of their "
              f"displacement, from before's {same}")


if __name__ == "__main__":
    main()
