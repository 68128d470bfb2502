"""Benchmark diffgeo's CPAB transformations against libcpab (PyPI `libcpab==0.1.3`, the maintained fork of
SkafteNicki/libcpab).

Usage:

    pip install --no-deps --target /path/to/libcpab_pkg libcpab==0.1.3        # outside this repo
    python bench/cpab.py --ref /path/to/libcpab_pkg          # or set CPAB_REF=/path/to/libcpab_pkg
    python bench/cpab.py --ref /path/to/libcpab_pkg --quick  # one repeat each
    python bench/cpab.py --ref /path/to/libcpab_pkg --lib-only   # libcpab side only
    python bench/cpab.py --ref /path/to/libcpab_pkg --scales 1,10,100   # also θ at 10x and 100x the prior's scale

libcpab's wheel ships no C/CUDA sources: at import it tries to JIT-compile them with
`torch.utils.cpp_extension.load`, fails, and falls back to its pure-PyTorch path
(`CPAB_transformer_slow`: 50 steps of per-cell matrix exponentials, gradients by autograd).
We make that failed build fail at once (no build directory, no CUDA warning); the fallback is what is timed.
libcpab caches its basis in <ref>/basis_files/.

Both sides use the 3x3 tessellation (4 triangles per square, split by both diagonals) with zero boundary
(libcpab: zero NORMAL velocity on the boundary, tangential sliding allowed). θ_lib is drawn from
libcpab's prior (length_scale 0.1, output_variance 1). A continuous piecewise-affine field is fixed by its
velocities at the tessellation vertices (square corners and centres), and velocity is linear in θ, so
our θ is the least-squares solution of  M_ours θ = v_lib(vertices),  where column k of M_ours is our
velocity at the vertices for θ = e_k. Its residual, and the difference of the two fields at random
points, are printed: both should be at rounding level.

Points are compared as abstract (p0, p1) in [0,1]^2 (both libraries call p0 "x"). Images are NOT
compared: libcpab's transform_data treats image dim 2 (rows) as its x and samples on linspace(0, 1, n)
(align_corners=True-like), whereas diffgeo takes x = column and pixel centres (align_corners=False).

What is measured (CPU, float32, torch's default number of threads or --threads), best of a few repeats after a
warm-up (on a machine shared with other jobs, --threads 1 gives far steadier numbers):
- forward: ours `cpab.warp(x, θ, tess)`, libcpab `T.transform_data(x, θ, [H, W])`, on a batch x [B, 1, H, W]
  with one θ per image;
- backward: the same, then `.sum().backward()` with respect to θ.
Accuracy: max |T - T_scipy| on the 28x28 grid of pixel centres, where T_scipy integrates libcpab's field
(from its cell matrices) with scipy's DOP853, rtol = atol = 1e-12.
"""
import argparse
import contextlib
import os
import sys
import time
import types
import warnings

import numpy as np
import torch
from scipy.integrate import solve_ivp

from _common import best_time, machine

NC = (3, 3)
SIZES = (28, 64)


# ---------------------------------------------------------------- libcpab (reference) side

@contextlib.contextmanager
def _no_jit_build():
    "Make `from torch.utils.cpp_extension import load` give a `load` that fails at once (libcpab then falls back)."
    name = "torch.utils.cpp_extension"
    saved = sys.modules.get(name)
    stub = types.ModuleType(name)

    def load(*args, **kwargs):
        raise RuntimeError("JIT build disabled for the benchmark")
    stub.load = load
    sys.modules[name] = stub
    try:
        yield
    finally:
        if saved is None: sys.modules.pop(name, None)
        else: sys.modules[name] = saved


def load_libcpab(path):
    "Import libcpab from the directory `path` (a `pip install --target` dir or a clone), or exit with how to get it."
    msg = ("libcpab is needed, installed OUTSIDE this repository:\n"
           "    pip install --no-deps --target /path/to/libcpab_pkg libcpab==0.1.3\n"
           "then run  python bench/cpab.py --ref /path/to/libcpab_pkg  (or set CPAB_REF).")
    if not path: sys.exit("No reference given.\n" + msg)
    path = os.path.abspath(path)
    sys.path.insert(0, path)
    try:
        with _no_jit_build():
            import libcpab
            import libcpab.transformer as transformer
    except ImportError as e:
        sys.exit(f"Could not import libcpab from {path!r} ({e}).\n" + msg)
    if not os.path.realpath(libcpab.__file__).startswith(os.path.realpath(path) + os.sep):
        sys.exit(f"'import libcpab' found {libcpab.__file__}, not one under {path}.\n" + msg)
    if transformer._cpu_succes:
        print("note: libcpab has a compiled CPU kernel here; timing its fast path", file=sys.stderr)
    warnings.filterwarnings("ignore", message=".*torch.meshgrid.*")  # libcpab's uniform_meshgrid
    return libcpab


def lib_cell_matrices(T, theta):
    "libcpab's cell matrices A [n, nC, 2, 3] (float64) for θ [n, d]: v(p) = A[c] @ (p0, p1, 1) in cell c."
    B = torch.as_tensor(T.params.basis, dtype=torch.float64)      # [6 nC, d], orthonormal columns
    return (theta.double() @ B.T).reshape(len(theta), T.params.nC, 2, 3)


def cell_index(p, nc):
    """Index of a triangle containing each point p [N, 2] in libcpab's numbering: square (i, j) (i along p0,
    j along p1) has triangles 4 (j nc0 + i) + t, t = 0 on the edge p1 = j/nc1, 1 on p0 = (i+1)/nc0,
    2 on p1 = (j+1)/nc1, 3 on p0 = i/nc0 (the nearest edge in local square coordinates)."""
    nx, ny = nc
    q = np.clip(p, 0.0, 1.0) * (nx, ny)
    i = np.minimum(np.floor(q[:, 0]), nx - 1); j = np.minimum(np.floor(q[:, 1]), ny - 1)
    u, v = q[:, 0] - i, q[:, 1] - j
    t = np.argmin(np.stack([v, 1 - u, 1 - v, u], 1), 1)
    return (4 * (j * nx + i) + t).astype(np.int64)


def cpa_velocity(p, A, nc):
    "Velocity [N, 2] of the CPA field with cell matrices A [nC, 2, 3] (numpy) at points p [N, 2]."
    return np.einsum("nij,nj->ni", A[cell_index(p, nc)], np.c_[p, np.ones(len(p))])


def scipy_transform(p, A, nc, tol=1e-12):
    "Integrate the CPA field for unit time from p [N, 2] with DOP853 (rtol = atol = tol), all points as one system."
    f = lambda t, y: cpa_velocity(y.reshape(-1, 2), A, nc).ravel()
    # max_step: the field has kinks on the cell edges, which an adaptive step can otherwise skip over
    sol = solve_ivp(f, (0.0, 1.0), p.ravel(), method="DOP853", rtol=tol, atol=tol, max_step=0.02)
    assert sol.success, sol.message
    return sol.y[:, -1].reshape(-1, 2)


def vertices(nc):
    "Tessellation vertices [V, 2]: square corners (p1-major) then square centres (p1-major)."
    nx, ny = nc
    corners = [(i / nx, j / ny) for j in range(ny + 1) for i in range(nx + 1)]
    centres = [((i + .5) / nx, (j + .5) / ny) for j in range(ny) for i in range(nx)]
    return np.array(corners + centres)


def pixel_centres(n):
    "Pixel centres of an n x n image as (x = (c + .5)/n, y = (r + .5)/n), row-major [n*n, 2]."
    g = (np.arange(n) + 0.5) / n
    y, x = np.meshgrid(g, g, indexing="ij")
    return np.stack([x.ravel(), y.ravel()], 1)


# ---------------------------------------------------------------- mapping θ_lib -> θ_ours

def ours_vertex_matrix(cpab, tess, verts):
    "M [2V, d] (float64): column k is our velocity at the vertices for θ = e_k."
    eye = torch.eye(tess.dim, dtype=torch.float64)
    v = cpab.velocity(torch.as_tensor(verts, dtype=torch.float64), eye, tess)   # [d, V, 2]
    return v.reshape(tess.dim, -1).T.double()


def lib_vertex_matrix(T, verts):
    "M [2V, d_lib] (float64): column k is libcpab's velocity at the vertices for θ = e_k."
    A = lib_cell_matrices(T, torch.eye(T.get_theta_dim(), dtype=torch.float64)).numpy()
    return np.stack([cpa_velocity(verts, a, NC).ravel() for a in A], 1)


def lib_prior_covariance(T, length_scale, output_variance):
    "The covariance of θ_lib that libcpab's sample_transformation_with_prior hands to its Gaussian sampler."
    seen = {}
    sampler = T.sample_transformation
    T.sample_transformation = lambda n_sample=1, mean=None, cov=None: seen.setdefault("cov", cov)
    try:
        T.sample_transformation_with_prior(1, length_scale=length_scale, output_variance=output_variance)
    finally:
        T.sample_transformation = sampler
    return seen["cov"].double().numpy()


def theta_map(cpab, tess, T):
    "P [d_ours, d_lib] with v_ours(P θ_lib) = v_lib(θ_lib) at the vertices (least squares); prints how well they match."
    verts = vertices(NC)
    M_ours = ours_vertex_matrix(cpab, tess, verts).numpy()
    M_lib = lib_vertex_matrix(T, verts)
    P, *_ = np.linalg.lstsq(M_ours, M_lib, rcond=None)
    resid = np.abs(M_ours @ P - M_lib).max()
    print(f"θ mapping: d_lib = {T.get_theta_dim()}, d_ours = {tess.dim}, rank M_ours = {np.linalg.matrix_rank(M_ours)}, "
          f"max vertex residual over the basis {resid:.1e} (max |M_lib| {np.abs(M_lib).max():.2f})")
    if resid > 1e-9 * max(1.0, np.abs(M_lib).max()):
        print("  WARNING: our field space does not contain libcpab's (different tessellation or boundary condition?)")
    return P


def check_mapping(cpab, tess, T, P, theta_lib):
    "Compare the mapped fields at random points, and the priors (libcpab's covariance pushed through P vs ours)."
    rng = np.random.default_rng(0)
    p = rng.random((1000, 2))
    th = torch.from_numpy(theta_lib[:1].double().numpy() @ P.T)
    v_ours = cpab.velocity(torch.from_numpy(p), th, tess)[0].numpy()
    v_lib = cpa_velocity(p, lib_cell_matrices(T, theta_lib[:1])[0].numpy(), NC)
    print(f"  fields at 1000 random points, max |v_ours - v_lib| = {np.abs(v_ours - v_lib).max():.1e}")
    if hasattr(cpab, "covariance"):
        for ls, ov in [(0.1, 1.0), (0.3, 2.0)]:
            S_lib = P @ lib_prior_covariance(T, ls, ov) @ P.T
            S_ours = cpab.covariance(tess, length_scale=ls, output_variance=ov).double().numpy()
            print(f"  prior covariance (length_scale {ls}, output_variance {ov}): max |P S_lib P^T - S_ours| = "
                  f"{np.abs(S_lib - S_ours).max():.1e} (max |S_ours| {np.abs(S_ours).max():.2f}; libcpab's "
                  "covariance is float32)")
            if ov != 1:   # libcpab multiplies its kernel by output_variance**2 (a standard deviation), we by output_variance
                S_sq = cpab.covariance(tess, length_scale=ls, output_variance=ov ** 2).double().numpy()
                print(f"    libcpab squares output_variance: against ours at output_variance {ov ** 2:g}, "
                      f"max |P S_lib P^T - S_ours| = {np.abs(S_lib - S_sq).max():.1e}")


# ---------------------------------------------------------------- main

def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ref", default=os.environ.get("CPAB_REF"), help="directory holding the libcpab package")
    p.add_argument("--quick", action="store_true", help="one repeat each")
    p.add_argument("--lib-only", action="store_true", help="time libcpab only (no diffgeo.cpab)")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scales", default="1", help="comma-separated multiples of the prior's θ to time (the scales other "
                   "than 1 at 28x28 only, without the PyTorch path), e.g. 1,10,100")
    p.add_argument("--threads", type=int, default=None,
                   help="torch intra-op threads (default: torch's); 1 is steadier on a machine shared with other jobs")
    args = p.parse_args()
    if args.threads: torch.set_num_threads(args.threads)
    lc = load_libcpab(args.ref)
    cpab = None
    if not args.lib_only:
        try:
            from diffgeo import cpab
        except ImportError as e:
            sys.exit(f"Could not import diffgeo.cpab ({e}); use --lib-only for the libcpab side alone.")
    ours_reps, ref_reps = (1, 1) if args.quick else (10, 3)

    B = args.batch
    T = lc.Cpab(list(NC), device="cpu", zero_boundary=True, volume_perservation=False)
    torch.manual_seed(args.seed)
    theta_lib = T.sample_transformation_with_prior(B, length_scale=0.1, output_variance=1.0)   # [B, d] float32
    print(f"{machine()}; tessellation {NC}, zero boundary, "
          f"batch {B}, θ from libcpab's prior (seed {args.seed}); best of {ours_reps} (ours) / {ref_reps} (libcpab) "
          "repeats after a warm-up\n")

    # sanity: our numpy reading of libcpab's cell matrices agrees with libcpab's own velocity function
    pts = pixel_centres(28)
    A0 = lib_cell_matrices(T, theta_lib[:1])[0].numpy()
    v_own = T.calc_vectorfield(torch.from_numpy(pts.T.copy()), theta_lib[:1].double()).numpy().T
    print(f"libcpab calc_vectorfield vs numpy CPA field (28x28 points): max diff {np.abs(v_own - cpa_velocity(pts, A0, NC)).max():.1e}")

    if cpab is not None:
        tess = cpab.Tessellation(NC, zero_boundary=True, volume_preservation=False)
        P = theta_map(cpab, tess, T)
        theta_ours = torch.from_numpy(theta_lib.double().numpy() @ P.T)   # [B, d_ours] float64
        check_mapping(cpab, tess, T, P, theta_lib)

    # accuracy on the 28x28 pixel centres, first θ of the batch
    t0 = time.perf_counter()
    T_scipy = scipy_transform(pts, A0, NC)
    took = time.perf_counter() - t0
    # the field's kinks at cell edges limit DOP853: estimate the reference's own error from a tighter run
    ref_err = np.abs(scipy_transform(pts, A0, NC, tol=1e-13) - T_scipy).max()
    print(f"\nAccuracy, 28x28 points, θ[0] (scipy DOP853 reference: {took:.1f} s, "
          f"|T_scipy(1e-12) - T_scipy(1e-13)| = {ref_err:.1e}):")
    T_lib = T.transform_grid(torch.from_numpy(pts.T.astype(np.float32)), theta_lib[:1])[0].numpy().T
    print(f"  libcpab (float32, {T.params.nstepsolver} steps): max |T_lib - T_scipy|  = {np.abs(T_lib - T_scipy).max():.2e}")
    if cpab is not None:
        for dtype in (torch.float32, torch.float64):
            T_ours = cpab.transform(torch.from_numpy(pts).to(dtype), theta_ours[:1].to(dtype), tess)[0].double().numpy()
            print(f"  ours ({str(dtype)[6:]}):                max |T_ours - T_scipy| = {np.abs(T_ours - T_scipy).max():.2e}")

    # throughput
    rows = []
    scales = [float(v) for v in args.scales.split(",")]
    for scale, n in [(1.0, n) for n in SIZES if 1.0 in scales] + [(v, 28) for v in scales if v != 1.0]:
        x = torch.rand(B, 1, n, n)
        case = f"{B}x1x{n}x{n}" + ("" if scale == 1 else f" θ×{scale:g}")
        th_lib = theta_lib * scale

        def lib_fwd(): return T.transform_data(x, th_lib, [n, n])

        def lib_bwd():
            th = th_lib.clone().requires_grad_(True)
            T.transform_data(x, th, [n, n]).sum().backward()

        try:
            res = {"libcpab": (B / best_time(lib_fwd, ref_reps), B / best_time(lib_bwd, ref_reps))}
        except (IndexError, RuntimeError) as e:   # at 100x its fixed 50 steps send points to NaN, and indexing fails
            print(f"  libcpab fails at {case}: {type(e).__name__}: {str(e)[:80]}", file=sys.stderr)
            res = {"libcpab": (None, None)}
        if cpab is not None:
            th32 = (theta_ours * scale).float()

            def ours_fwd(): return cpab.warp(x, th32, tess)

            def ours_bwd():
                th = th32.clone().requires_grad_(True)
                cpab.warp(x, th, tess).sum().backward()

            with warnings.catch_warnings():   # at 100x the step count is capped (MAX_STEPS), with a warning per call
                warnings.simplefilter("ignore")
                res["ours"] = (B / best_time(ours_fwd, ours_reps), B / best_time(ours_bwd, ours_reps))
                if scale == 1:
                    saved, cpab.COMPILED = cpab.COMPILED, False                 # the same calls on the pure-PyTorch path
                    res["torch"] = (B / best_time(ours_fwd, ours_reps), B / best_time(ours_bwd, ours_reps))
                    cpab.COMPILED = saved
        rows.append((case, res))
        print(f"  done {case}", file=sys.stderr, flush=True)

    compiled = cpab is not None and cpab.COMPILED and cpab._kernels() is not None
    print(f"\nours: {'the compiled integrator (numba)' if compiled else 'the pure-PyTorch integrator'}; "
          "ours (torch): the same calls with cpab.COMPILED = False")
    print(f"\n{'case':<20} {'pass':<9} {'ours img/s':>11} {'ours (torch)':>13} {'libcpab img/s':>14} {'ours/libcpab':>13} {'torch/libcpab':>14}")
    for case, res in rows:
        for k, name in enumerate(("forward", "backward")):
            lib = res["libcpab"][k]
            ours, torch_ = (res[key][k] if key in res else None for key in ("ours", "torch"))
            cell = lambda v: ("—", "—") if v is None else (f"{v:.1f}", "—" if lib is None else f"{v / lib:.1f}x")
            (o, r), (t, tr) = cell(ours), cell(torch_)
            print(f"{case:<20} {name:<9} {o:>11} {t:>13} {'fails' if lib is None else f'{lib:.1f}':>14} {r:>13} {tr:>14}")


if __name__ == "__main__":
    main()
