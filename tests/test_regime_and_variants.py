"""Issue 58/59 plumbing: declared variants of a profile, the training curve that survives a resume, log-spaced epochs,
the ledger's refusals, the headline table, the regime of a Petrini run, the fast training settings."""
import json

import numpy as np
import pytest
import torch
import xarray as xr

from diffgeo import claims, data, models, site, train
from diffgeo.experiments import petrini, petrini_fig3
from diffgeo.scaffold import Experiment, REGISTRY, RunOptions, Var

site.experiments()


def test_log_epochs_span_the_training_once_each():
    e = petrini_fig3.log_epochs(250)
    assert e[0] == 1 and e[-1] == 250 and e == sorted(set(e)) and len(e) == 16
    assert petrini_fig3.log_epochs(1) == [1]
    ratios = np.array(e[3:]) / np.array(e[2:-1])
    assert (ratios > 1.2).all() and (ratios < 1.6).all()          # about √2 apart once rounding stops mattering
    with pytest.raises(ValueError, match="ratio"): petrini_fig3.log_epochs(10, ratio=1.0)
    with pytest.raises(ValueError): petrini_fig3.log_epochs(0)


def test_the_steps_variant_is_the_papers_training_of_resnet18():
    p = petrini_fig3.EXPERIMENT._prepare(RunOptions("long", tag="steps", work_dir="/tmp/unused"), {})["p"]
    assert p["archs"] == ["ResNet18"] and p["steps"]["ResNet18"] == petrini.PAPER_STEPS == 88_000
    assert p["warmup"] == 0.0 and p["curve_at"] == "log" and p["P"] == 45_000
    # a setting given to run still wins over the variant's
    p2 = petrini_fig3.EXPERIMENT._prepare(RunOptions("long", tag="steps", work_dir="/tmp/unused"), {"seeds": [3]})["p"]
    assert p2["seeds"] == [3]
    # the untagged profile is untouched
    p3 = petrini_fig3.EXPERIMENT._prepare(RunOptions("long", work_dir="/tmp/unused"), {})["p"]
    assert p3["curve_at"] == "every" and len(p3["archs"]) == 3


def test_variant_refuses_what_no_profile_has():
    e = Experiment("petrini", "toy_variant", {"cpu": {"n": 1}}, {"n": Var(("n",), "n")})
    REGISTRY.pop(e.name)
    with pytest.raises(ValueError, match="no settings"): e.variant("cpu", "x", m=2)
    with pytest.raises(ValueError, match="profile"): e.variant("paper", "x", n=2)
    with pytest.raises(ValueError, match="tag"): e.variant("cpu", "a b", n=2)
    assert e.variant("cpu", "two", n=2) == {"n": 2}


def _tiny():
    torch.manual_seed(0)
    net = models.build("LeNet", in_channels=1, n_classes=10, size=28)
    g = torch.Generator().manual_seed(0)
    x = torch.rand(16, 1, 28, 28, generator=g)
    test = data.Split(torch.rand(20, 1, 28, 28, generator=g), torch.randint(10, (20,), generator=g))
    from diffgeo import stability
    return net, x, test, stability.Diffeomorphism(delta=1.0, c=3)


def test_training_curve_survives_a_resume_and_forgets_an_abandoned_training(tmp_path):
    net, x, test, deform = _tiny()
    f = tmp_path / "ck.pt.curve.json"
    c = petrini_fig3.TrainingCurve(net, x, [1, 2, 4], test=test, file=f, perturbation=deform, seed=0)
    c(1); c(2); c(3)                                           # 3 is not among the epochs: not measured
    assert sorted(json.loads(f.read_text())) == ["0", "1", "2"]
    assert set(c.dataset.data_vars) == {"D_f", "G_f", "R_f", "test_error"}
    again = petrini_fig3.TrainingCurve(net, x, [1, 2, 4], test=test, file=f, perturbation=deform, seed=0)
    assert again.rows == c.rows                                # read back, epoch 0 not measured again
    again(4)
    assert list(again.dataset.epoch.values) == [0, 1, 2, 4]
    again(1)                                                   # a training restarted from scratch: later epochs dropped
    assert list(again.dataset.epoch.values) == [0, 1]
    fresh = petrini_fig3.TrainingCurve(net, x, [1], perturbation=deform, seed=0)   # without a file, in memory only
    assert "test_error" not in fresh.dataset and fresh.file is None


def test_ledger_refuses_unknown_names_and_a_root_without_results(tmp_path):
    with pytest.raises(ValueError, match="no experiments named"): claims.ledger(["petrini_fig99"])
    with pytest.raises(FileNotFoundError, match="results"): claims.ledger(root=tmp_path)
    df = claims.ledger(["petrini_fig6"])                       # names are taken, not answered with zero rows
    assert not df.empty and set(df.experiment) == {"petrini_fig6"}
    assert {"rules", "regime", "paper_regime", "in_regime", "kind"} <= set(df.columns)


def test_headline_table_leads_and_folds_the_rest():
    md = claims.render("petrini", headlines=["petrini_fig5:correlation", "petrini_fig7:slope"])
    head, rest = md.split("<details>")
    assert head.count("\n| ") == 2 and "Fig. 5" in head and "Fig. 7" in head
    assert "Every claim" in rest and "petrini_fig12" in rest
    with pytest.raises(ValueError, match="no such claims"): claims.render("petrini", headlines=["petrini_fig5:nope"])
    with pytest.raises(ValueError, match="paper key"): claims.render("petrini_fig5", headlines=[])


def test_regime_of_a_petrini_run_says_steps_width_and_errors():
    ds = claims.committed("petrini_fig5")["long"]
    ours, paper, same = petrini.regime(ds)
    assert "3,520 steps" in ours and "width" in ours and "test error" in ours and not same
    assert "88,000 steps" in paper


def test_fast_settings_are_trains_keywords():
    for arch in ("ResNet18", "VGG11", "EfficientNetB0", "LeNet", "FullConnL4"):
        kw = train.fast_settings(arch)
        assert kw["amp"] in (None, *train.AMP) and kw["memory_format"] in train.MEMORY_FORMATS
    assert train.fast_settings("ResNet18", "cuda") == dict(amp=None, memory_format="auto")
    with pytest.raises(ValueError): train.fast_settings("NoSuchNet")


def test_every_verdict_carries_its_regime():
    "Issue 58 §3: every verdict that judged a dataset (reproduced, partly, not) says in which regime, beside the paper's."
    df = claims.ledger()
    judged = df[df.status.isin(["reproduced", "partly", "not"])]
    missing = judged[judged.in_regime.isna()]
    assert missing.empty, f"verdicts without a regime (declare EXPERIMENT.regime): {sorted(set(missing.experiment))}"
    assert (judged.regime.str.len() > 0).all() and (judged.paper_regime.str.len() > 0).all()


def test_summary_counts_the_papers_regime_apart_and_leaves_implementation_out():
    md = claims.summary_table()
    df = claims.ledger()
    other = df[df.main.astype(bool) & (df.kind == "claim") & (df.status == "reproduced") & (df.in_regime == False)]   # noqa: E712
    if not other.empty: assert "reproduced in another regime" in md
    n = {p: len(g[g.profile == "cpu"]) for p, g in df[df.main.astype(bool) & (df.kind == "claim")].groupby("paper")}
    for p, k in n.items(): assert f"| {k} |" in md, (p, k)


def test_committed_refuses_an_unknown_experiment_and_a_bad_root(tmp_path):
    with pytest.raises(ValueError, match="no experiment named"): claims.committed("petrini_fig99")
    with pytest.raises(FileNotFoundError, match="results"): claims.committed("petrini_fig5", tmp_path)


def test_run_options_refuse_bad_choices():
    "run and plan share RunOptions, which refuses a bad choice before any setting is resolved."
    for bad, match in ((dict(code_changed="keep"), "code_changed"), (dict(amp="fp8"), "amp"), (dict(stage="score"), "stage")):
        with pytest.raises(ValueError, match=match): RunOptions("smoke", **bad)
    with pytest.raises(TypeError, match="RunOptions"): petrini_fig3.EXPERIMENT._prepare({"profile": "long"}, {})
    with pytest.raises(ValueError, match="code_changed"): petrini_fig3.EXPERIMENT.plan("smoke", code_changed="keep")
