"""Issue 32: bad inputs to the modules added since the last hardening end as a clear error naming the fix, not a silently
wrong result. Each case here was silently wrong before its fix."""
import math

import pytest
import torch

from diffgeo import diffeo, maps, models, probes


class TestSilentlyWrong:
    def test_fraction_folded_refuses_nan_determinants(self):
        J = torch.eye(2).expand(1, 5, 2, 2).clone(); J[0, 2, 0, 0] = math.nan
        with pytest.raises(ValueError, match=r"J contains NaN or infinite values \(1 of 20\)"): maps.fraction_folded(J)
        with pytest.raises(ValueError, match="NaN determinant at 1 of 5 points"):   # finite entries, NaN determinant (inf − inf)
            maps.fraction_folded(torch.cat([torch.full((1, 1, 2, 2), 1e200, dtype=torch.float64), torch.eye(2, dtype=torch.float64).expand(1, 4, 2, 2)], 1))
        J[0, 2, 0, 0] = -1.0
        assert maps.fraction_folded(J).item() == pytest.approx(0.2)

    def test_nan_points_and_jacobians_are_refused(self):
        p = maps.pixel_grid(4, "unit"); p[1, 2, 0] = math.nan
        with pytest.raises(ValueError, match="points contains NaN"): maps.convert(p, 4, "unit", "pixel")
        with pytest.raises(ValueError, match="points contains NaN"): maps.warp(torch.rand(1, 1, 4, 4), p[None], frame="unit")
        with pytest.raises(ValueError, match="J contains NaN"): maps.det(torch.full((3, 2, 2), math.inf))

    def test_pixel_grid_refuses_integer_dtypes(self):
        with pytest.raises(TypeError, match="floating-point torch.dtype"): maps.pixel_grid(4, "unit", dtype=torch.int64)
        assert maps.pixel_grid(4, "unit", dtype=torch.float64).dtype == torch.float64

    @pytest.mark.parametrize("criterion", ["xi", "det"])
    def test_is_diffeomorphism_refuses_nan_coefficients(self, criterion):
        c = diffeo.sample_coefficients(2, 1e-3, 3, generator=torch.Generator().manual_seed(0)); c[1, 0, 0, 0] = math.nan
        with pytest.raises(ValueError, match="coeffs contains NaN"): diffeo.is_diffeomorphism(c, (8, 8), criterion)
        assert diffeo.is_diffeomorphism(c[:1], (8, 8), criterion).tolist() == [True]


class TestCommandLine:
    @pytest.mark.parametrize("args, says", [
        (("stability", "LeNet", "-n", "4", "--size", "0"), "size must be >= 2"),
        (("stability", "LeNet", "-n", "4", "--layers", ",,"), "names no layer"),
    ])
    def test_ignored_options_are_refused(self, args, says, capsys):
        from diffgeo import cli
        assert cli.main(list(args)) == 2
        assert says in capsys.readouterr().err

    def test_the_users_files_are_named_not_a_traceback(self, tmp_path, capsys):
        "Weights that are not a state dict or do not fit, image folders of mixed sizes, --bootstrap 1, --out under a file: one line each."
        import numpy as np
        from PIL import Image
        from diffgeo import cli
        (tmp_path / "junk.pt").write_text("not a torch file")
        net = models.build("LeNet", 1, 10, 28)
        torch.save({k: torch.zeros(v.shape[0] + 1, *v.shape[1:]) if k == "fc1.weight" else v for k, v in net.state_dict().items()},
                   tmp_path / "shape.pt")
        for cls, side in (("a", 10), ("b", 12)):
            (tmp_path / "imgs" / cls).mkdir(parents=True)
            Image.fromarray(np.zeros((side, side, 3), np.uint8)).save(tmp_path / "imgs" / cls / "1.png")
        (tmp_path / "file").write_text("x")
        for args, says in [(["--weights", str(tmp_path / "junk.pt")], "not a weights file torch can load"),
                           (["--weights", str(tmp_path / "shape.pt")], "size mismatch for fc1.weight"),
                           (["--data", str(tmp_path / "imgs")], "have 2 sizes (10x10, 12x12); pass --size N"),
                           (["--bootstrap", "1"], "at least 2 (or 0: no intervals)"),
                           (["--out", str(tmp_path / "file" / "x.nc")], "is a file, not a folder")]:
            assert cli.main(["stability", "LeNet", "-n", "2", "--no-progress", *args]) == 2, args
            err = capsys.readouterr().err
            assert says in err and "Traceback" not in err, (args, err)
        assert cli.main(["stability", "LeNet", "-n", "2", "--no-progress", "--bootstrap", "0"]) == 0
        assert "no intervals (--bootstrap 0)" in capsys.readouterr().out

    def test_a_network_without_weights_is_seeded(self, tmp_path, capsys):
        "The same command with the same --seed measures the same network (before: R_f 1.48, then 0.27)."
        import xarray as xr
        from diffgeo import cli
        outs = []
        for i in range(2):
            torch.manual_seed(100 + i)  # whatever the global state before the command
            assert cli.main(["stability", "LeNet", "-n", "8", "--bootstrap", "2", "--seed", "0", "--no-progress",
                             "--out", str(tmp_path / f"{i}.nc")]) == 0
            outs.append(xr.load_dataset(tmp_path / f"{i}.nc").R_f.values)
        assert outs[0] == pytest.approx(outs[1], rel=1e-6)


class TestStripe:
    def test_gradient_flow_refuses_zero_one_labels(self):
        from diffgeo import stripe
        x, y = stripe.stripe_data(32, 3, seed=0)
        net = stripe.StripeNet(3, 20, 1e-2, generator=torch.Generator().manual_seed(0))
        with pytest.raises(ValueError, match=r"2 \* y - 1"): stripe.gradient_flow(net, x, (y + 1) / 2, max_steps=5)

    def test_gradient_ratio_of_an_untrained_net_is_refused(self):
        from diffgeo import stripe
        x, y = stripe.stripe_data(32, 3, seed=0)
        net = stripe.StripeNet(3, 20, 1e-2, generator=torch.Generator().manual_seed(0))
        with pytest.raises(ValueError, match="train it first"): stripe.gradient_ratio(net, x)
        stripe.gradient_flow(net, x, y, max_steps=20)
        assert 0 < stripe.gradient_ratio(net, x) < 10


def test_choose_nu_never_picks_a_nan_si():
    from diffgeo import invariance
    si = {0.1: 0.5, 1.0: math.nan}
    with pytest.warns(UserWarning): nu, tried = invariance.choose_nu(si.get, [0.1, 1.0])
    assert nu == 0.1
    with pytest.raises(ValueError, match="not finite for any"): invariance.choose_nu(lambda nu: math.nan, [0.1, 1.0])


def test_stamp_stores_tensor_and_array_parameters_as_numbers():
    import numpy as np
    import xarray as xr
    from diffgeo import results
    ds = results.stamp(xr.Dataset(), {"w": torch.arange(2000.0), "a": np.array([1, 2]), "s": np.float32(0.5), "dtype": torch.float64},
                       "cpu", results.now())
    p = results.parameters(ds)
    assert p["w"] == list(range(2000)) and p["a"] == [1, 2] and p["s"] == 0.5 and p["dtype"] == "torch.float64"


def test_deform_warns_beyond_the_diffeomorphism_range():
    x = torch.rand(2, 1, 16, 16, generator=torch.Generator().manual_seed(0))
    with pytest.warns(UserWarning, match="exceeds the diffeomorphism range"): diffeo.deform(x, T=10.0, c=3)
    with pytest.warns(UserWarning, match="exceeds the diffeomorphism range"): diffeo.deform(x, T=torch.tensor([1e-4, 10.0]), c=3)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error"); diffeo.deform(x, T=1e-3, c=3)


class TestInvariance:
    def setup_method(self):
        from torch import nn
        from diffgeo import invariance
        self.inv, self.g = invariance, invariance.Rotations(4)
        self.x = torch.rand(3, 1, 12, 12, generator=torch.Generator().manual_seed(0))
        self.model = nn.Sequential(nn.Flatten(), nn.Linear(144, 5))

    def test_labels_outside_the_models_classes_are_refused(self):
        with pytest.raises(ValueError, match=r"labels in \[0, 5\)"):
            self.inv.invariance_measures(self.model, self.x, torch.tensor([0, 1, 7]), self.g, saliency_maps=False)

    def test_saliency_filter_size_must_be_odd(self):
        with pytest.raises(ValueError, match="size must be odd"): self.inv.saliency(self.model, self.x, torch.tensor([0, 1, 2]), steps=2, size=2)
        assert self.inv.saliency(self.model, self.x, torch.tensor([0, 1, 2]), steps=2, size=3).shape == (3, 12, 12)

    def test_saliency_similarity_refuses_elements_outside_the_group(self):
        m = torch.rand(3, 12, 12)
        with pytest.raises(ValueError, match="k must be <= 3, got 7"): self.inv.saliency_similarity(m, m, self.g, 7)
        with pytest.raises(ValueError, match=r"integers in \[0, 4\)"): self.inv.saliency_similarity(m, m, self.g, torch.tensor([0, 1, 4]))
        assert self.inv.saliency_similarity(m, m, self.g, 0).tolist() == pytest.approx([1.0] * 3)


def uneven_cell(seed):
    "A cell that returns an extra variable at seed 1 only."
    import numpy as np
    import xarray as xr
    from diffgeo.results import cf_attrs
    ds = xr.Dataset({"a": ((), np.float64(seed), cf_attrs("a value"))})
    if seed == 1: ds["b"] = ((), np.float64(1.0), cf_attrs("another value"))
    return ds


def test_merge_refuses_cells_with_other_variables(tmp_path):
    from diffgeo.sweep import ShardError, run_sweep
    with pytest.raises(ShardError, match=r"seed-1: without none, with \['b'\] besides"):
        run_sweep(uneven_cell, {"seed": [0, 1, 2]}, tmp_path, progress=False)


def test_simplex_grid_refuses_a_grid_too_large_up_front(monkeypatch):
    "Refused before the enumeration starts (before: 41 s of it, then a MemoryError)."
    from diffgeo import riemann
    anchors = torch.rand(3, 1, 28, 28)
    with monkeypatch.context() as m:
        m.setattr(riemann.itertools, "product", lambda *a, **k: pytest.fail("enumerated before refusing"))
        with pytest.raises(ValueError, match="2,003,001 points"): riemann.simplex_grid(anchors, 2000)
    assert riemann.simplex_grid(anchors, 4)[0].shape == (15, 1, 28, 28)


def _rank_one_shallow():
    "A shallow net whose hidden weights are all parallel: its metric on the plane has rank 1 everywhere."
    W = torch.tensor([[1.0, 0.0], [2.0, 0.0], [-1.5, 0.0]], dtype=torch.float64)
    b = torch.tensor([0.1, -0.2, 0.3], dtype=torch.float64)
    x = torch.tensor([[0.3, -0.2], [-0.5, 0.7]], dtype=torch.float64)
    return W, b, x, (lambda z: torch.tanh(z @ W.T + b))


def test_curvature_and_volume_say_where_the_metric_is_degenerate():
    "Where the map loses rank: the Ricci scalar is NaN and the log volume -inf, with a warning naming the points; a regular map warns nothing."
    from diffgeo import riemann
    W, b, x, f = _rank_one_shallow()
    for name, fn, value in [("ricci gauss", lambda: riemann.ricci_scalar(f, x), math.nan),
                            ("ricci christoffel", lambda: riemann.ricci_scalar(f, x, method="christoffel"), math.nan),
                            ("shallow ricci", lambda: riemann.shallow_ricci_scalar(W, b, x), math.nan),
                            ("log volume", lambda: riemann.log_volume_element(f, x), -math.inf),
                            ("log volume cholesky", lambda: riemann.log_volume_element(f, x, method="cholesky"), -math.inf),
                            ("shallow log volume", lambda: riemann.shallow_log_volume_element(W, b, x), -math.inf),
                            ("estimate", lambda: riemann.log_volume_estimate(f, x, probes=4, steps=4)[0], -math.inf)]:
        with pytest.warns(UserWarning, match="degenerate metric at point 0, 1"):
            out = fn()
        assert (out.isnan().all() if math.isnan(value) else (out == value).all()), (name, out)
    W2 = torch.tensor([[1.0, 0.5], [-0.3, 2.0], [0.7, -1.1], [1.2, 0.4]], dtype=torch.float64)
    g = lambda z: torch.tanh(z @ W2.T)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")                                    # nothing to say for a regular map
        for out in (riemann.ricci_scalar(g, x), riemann.ricci_scalar(g, x, method="christoffel"),
                    riemann.shallow_ricci_scalar(W2, torch.zeros(4, dtype=torch.float64), x), riemann.log_volume_element(g, x)):
            assert out.isfinite().all()


def test_jacobian_matrix_refuses_a_map_that_mixes_the_batch():
    "A map whose output for one sample depends on the others (batch statistics, a shuffle) has no per-sample Jacobian: refused, naming eval mode."
    from torch import nn
    x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    net = nn.Sequential(nn.Linear(3, 5), nn.BatchNorm1d(5))
    for fn in (lambda z: z - z.mean(0), lambda z: z.flip(0)):
        with pytest.raises(ValueError, match="mixes the samples of the batch"): probes.jacobian_matrix(fn, x)
    with pytest.raises(ValueError, match="eval mode"): probes.jacobian_matrix(net.train(), x)
    J = probes.jacobian_matrix(net.eval(), x)                               # the same network in eval mode: per sample
    torch.testing.assert_close(J[1], torch.func.jacrev(lambda z: net(z[None])[0])(x[1]))
    assert probes.jacobian_matrix(lambda z: z.sin(), x[:1]).shape == (1, 3, 3)   # one sample: nothing to mix


def test_scaling_and_squaring_says_when_the_flow_leaves_its_grid():
    "A horizon that carries the middle of the domain off the grid is said (the field is extended as the border's); a grid too large is refused up front."
    import warnings
    from diffgeo import flows
    f = flows.VelocityField(2, 2, 1, stationary=True, activation="linear")
    with torch.no_grad(): f.weight.zero_(); f.bias.fill_(1.0); f.nu.copy_(torch.eye(2)[None])   # V = (1, 1) everywhere
    with pytest.warns(UserWarning, match="100% of the middle half"): e = flows.scaling_and_squaring(f, 5.0, 8, -1, 1, 33)
    with pytest.warns(UserWarning, match="outside the grid's domain"): e(torch.full((1, 2), 2.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(flows.scaling_and_squaring(f, 0.1, 8, -1, 1, 33)(torch.zeros(1, 2)), torch.full((1, 2), 0.1))
    with pytest.raises(ValueError, match="GiB, more than SQUARING_BYTES"): flows.scaling_and_squaring(f, 1.0, 8, -1, 1, 30_000)


def test_flow_refuses_runaway_step_counts(monkeypatch):
    "Substeps beyond MAX_STEPS are refused up front; the adaptive scheme stops at MAX_ADAPTIVE_STEPS per unit with a clear error."
    from diffgeo import flows
    f = flows.VelocityField(2, 2, 1, stationary=True, activation="linear")
    with torch.no_grad():                                                   # a rotation at 50 radians per unit time
        f.weight.copy_(torch.tensor([[[0.0, -1.0], [1.0, 0.0]]]) * 50); f.bias.zero_(); f.nu.copy_(torch.eye(2)[None])
    with pytest.raises(ValueError, match="more than MAX_STEPS"): flows.Flow(f, substeps=10**8)
    monkeypatch.setattr(flows, "MAX_ADAPTIVE_STEPS", 50)
    with pytest.raises(RuntimeError, match="more than MAX_ADAPTIVE_STEPS = 50 steps across unit 0"):
        flows.Flow(f, horizon=100.0, method="adaptive")(torch.ones(2, 2))
    assert flows.Flow(f, horizon=0.01, method="adaptive")(torch.ones(2, 2)).isfinite().all()


def test_a_lock_that_is_a_directory_is_refused_not_waited_on(tmp_path):
    "A directory where a cell's claim file goes used to read as a claim held by someone: the sweep waited on it."
    from diffgeo.sweep import ShardError, cell_id, run_sweep
    (tmp_path / f"{cell_id({'seed': 1})}.lock").mkdir()
    with pytest.raises(ShardError, match="is not a file.*remove it"):
        run_sweep(uneven_cell, {"seed": [1]}, tmp_path, progress=False)


def test_invariance_error_refuses_nan_logits():
    from diffgeo.invariance import invariance_error
    ok = torch.zeros(2, 3)
    for form in ("l2", "kl", "l2_normalized"):
        with pytest.raises(ValueError, match="fgx contains NaN or infinite values .* logits diverged"):
            invariance_error(ok, torch.tensor([[0.0, 1.0, float("inf")], [0.0, 0.0, 0.0]]), form)


def test_a_killed_write_leaves_no_temp_file_behind_the_next_write(tmp_path):
    "A writer killed mid-way leaves the old file and a temp file; the next write to the same target removes the temp file."
    import subprocess, sys, time
    from pathlib import Path
    from diffgeo import results
    target = tmp_path / "x.nc"
    results.atomic_write(target, lambda tmp: Path(tmp).write_bytes(b"old"))
    code = (f"import time\nfrom pathlib import Path\nfrom diffgeo import results\n"
            f"results.atomic_write(Path({str(target)!r}), lambda tmp: (Path(tmp).write_bytes(b'0' * 10**5), time.sleep(60)))\n")
    p = subprocess.Popen([sys.executable, "-c", code])
    for _ in range(200):
        if len(list(tmp_path.glob(".x.nc.*.tmp"))) and list(tmp_path.glob(".x.nc.*.tmp"))[0].stat().st_size: break
        time.sleep(0.05)
    p.kill(); p.wait()
    assert target.read_bytes() == b"old" and len(list(tmp_path.glob(".x.nc.*.tmp"))) == 1
    results.atomic_write(target, lambda tmp: Path(tmp).write_bytes(b"new"))
    assert sorted(f.name for f in tmp_path.iterdir()) == ["x.nc"] and target.read_bytes() == b"new"


def test_save_and_load_name_the_users_mistake(tmp_path):
    from diffgeo import results
    (tmp_path / "f").write_text("a file")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        results.atomic_write(tmp_path / "f" / "x.nc", lambda tmp: None)
    (tmp_path / "a.nc").write_text("not netcdf")
    with pytest.raises(ValueError, match="is not a netCDF file, or a truncated one"): results.load_dataset(tmp_path / "a.nc")
    with pytest.raises(FileNotFoundError, match="no dataset at"): results.load_dataset(tmp_path / "b.nc")


def test_the_users_mistake_is_named_not_torchs():
    "Wrong types (a seed for a generator, a class for a group, a string for a model, an int for a shape), non-differentiable maps, empty batches."
    from torch import nn
    from diffgeo import flows, invariance, riemann
    G, x = invariance.Rotations(4), torch.rand(2, 1, 8, 8)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 3)).eval()
    seed = "pass torch.Generator\\(\\).manual_seed\\(3\\)"
    for fn in (lambda: G.random(x, 3), lambda: riemann.log_volume_estimate(net, x, generator=3),
               lambda: flows.uniform_points(2, generator=3), lambda: flows.VelocityField(2, 3, 2, generator=3),
               lambda: invariance.InvariancePenalty(G, 1.0)(net, x, net(x), 3)):
        with pytest.raises(TypeError, match=seed): fn()
    with pytest.raises(TypeError, match="got the class Rotations; instantiate it"):
        invariance.invariance_measures(net, x, torch.tensor([0, 1]), invariance.Rotations)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"): invariance.invariance_measures("net", x, torch.tensor([0, 1]), G)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"): invariance.saliency(None, x, torch.tensor([0, 1]), steps=2)
    with pytest.raises(TypeError, match=r"in_shape must be the images' \(C, H, W\)"): invariance.perceptron(64, 3)
    with pytest.raises(TypeError, match="fn must be a callable map"): probes.jacobian_matrix(None, x)
    with pytest.raises(TypeError, match="fn must be a callable map"): flows.determinant_map("phi")
    numpy_map = lambda z: torch.tensor(z.detach().numpy())
    with pytest.raises(ValueError, match="does not depend differentiably on its input"): probes.pullback_metric(numpy_map, torch.ones(2, 3))
    with pytest.raises(ValueError, match="cannot be differentiated by torch.func"):
        riemann.ricci_scalar(numpy_map, torch.ones(2, 2, dtype=torch.float64))
    empty = invariance.invariance_measures(net, x[:0], torch.tensor([], dtype=torch.long), G, steps=2)   # empty in, empty out
    assert empty.sizes["sample"] == 0 and invariance.saliency(net, x[:0], torch.tensor([], dtype=torch.long), steps=2).shape == (0, 8, 8)


def test_stripe_and_cpab_name_wrong_types():
    from diffgeo import cpab, stripe
    net = stripe.StripeNet(2, 4, 0.1)
    y = torch.tensor([1.0, -1.0, 1.0], dtype=torch.float64)
    with pytest.raises(TypeError, match="net must be a StripeNet"): stripe.gradient_flow("net", torch.ones(3, 2, dtype=torch.float64), y)
    with pytest.raises(TypeError, match="convert with x.to"): stripe.gradient_flow(net, torch.ones(3, 2, dtype=torch.long), y)
    with pytest.raises(ValueError, match="holds no points"): stripe.gradient_flow(net, torch.ones(0, 2, dtype=torch.float64), y[:0])
    with pytest.raises(TypeError, match="tess must be a cpab.Tessellation"): cpab.sample("tess")
    with pytest.raises(TypeError, match="manual_seed\\(3\\)"): cpab.sample(cpab.Tessellation((2, 2)), generator=3)


def test_empty_batches_give_empty_results():
    "As `deform` does: no points in, no Jacobians, volumes, curvatures or singular values out (of the right trailing shape)."
    from torch import nn
    from diffgeo import invariance, riemann
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 3)).eval()
    x = torch.rand(0, 1, 8, 8)
    assert probes.jacobian_matrix(net, x).shape == (0, 3, 64)
    assert riemann.log_volume_element(net, x).shape == (0,) and riemann.log_volume_estimate(net, x)[1].shape == (0,)
    assert invariance.sigma_max(net, x).shape == (0,)
    f, e = (lambda z: torch.tanh(z @ torch.ones(3, 2, dtype=torch.float64).T)), torch.zeros(0, 2, dtype=torch.float64)
    assert riemann.ricci_scalar(f, e).shape == (0,) and riemann.ricci_scalar(f, e, method="christoffel").shape == (0,)
    assert riemann.nngp_metric(e).shape == (0, 2, 2) and riemann.nngp_log_volume_element(e).shape == (0,)
    assert riemann.nngp_ricci_scalar(e).shape == (0,)
    W, b = torch.ones(4, 2, dtype=torch.float64), torch.zeros(4, dtype=torch.float64)
    assert riemann.shallow_log_volume_element(W, b, e).shape == (0,) and riemann.shallow_ricci_scalar(W, b, e).shape == (0,)
    with pytest.raises(ValueError, match="empty batch and fn cannot take one"):
        probes.jacobian_matrix(lambda z: z.flatten(1).mean(0, keepdim=True).expand(max(len(z), 1), -1) if len(z) else 1.0, x)


def test_log_volume_estimate_says_when_its_quadrature_has_not_converged():
    "A spectrum over many decades with few Lanczos steps (the ResNet-50 case: 131 standard errors off) is said; a narrow one is not."
    import warnings
    from diffgeo import riemann
    g = torch.Generator().manual_seed(0)
    Q, _ = torch.linalg.qr(torch.randn(200, 200, dtype=torch.float64, generator=g))
    wide = Q * torch.logspace(0, -6, 200, dtype=torch.float64)              # singular values from 1 to 1e-6
    x = torch.randn(1, 200, dtype=torch.float64, generator=g)
    with pytest.warns(UserWarning, match="Lanczos quadrature has not converged at point 0"):
        riemann.log_volume_estimate(lambda z: z @ wide.T, x, probes=8, steps=6)
    narrow = Q * torch.linspace(1.0, 0.5, 200, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est, se = riemann.log_volume_estimate(lambda z: z @ narrow.T, x, probes=8, steps=30)
    exact = torch.linspace(1.0, 0.5, 200, dtype=torch.float64).log().sum()
    assert abs(est.item() - exact.item()) <= 4 * se.item() + 1e-9


def test_nested_progress_bars_leave_no_cursor_moves_in_a_log(monkeypatch):
    "Off a terminal (papermill --log-output), nested bars give plain lines: no ESC [ A cursor moves, no stray '[A' lines."
    import io, sys
    from diffgeo import core
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setenv("DIFFGEO_PROGRESS", "1")
    monkeypatch.setenv("DIFFGEO_PROGRESS_INTERVAL", "0")
    for _ in core.progress(range(2), "outer"):
        for _ in core.progress(range(3), "inner", position=1): pass
    text = err.getvalue()
    assert "outer" in text and "inner" in text
    assert "\x1b" not in text and "[A" not in text and "\r" not in text
    assert all(line.strip() == line and line for line in text.splitlines())
