"""The criteria of the Moskalev, Rousseau and Zavatone-Veth claims that an audit found loose, too strict or unclear, as
rewritten with the claims vocabulary: each test shows, on a committed dataset, what the new rule says where the old one
said otherwise (the old rule is written out where a mutation shows that it passed wrongly), and the regimes and the
headline claims declared beside them."""
from pathlib import Path

import numpy as np
import pytest

from diffgeo import claims
from diffgeo.scaffold import REGISTRY, experiments

ROOT = Path(__file__).resolve().parents[1]
experiments()


def _sets(name): return claims.committed(name, ROOT)


def _claim(name, key): return REGISTRY[name].claims[key]


def _verdict(name, key, ds): return _claim(name, key)(ds)


def _mutated(name, key, mutation, ds):
    "The claim's named mutation of `ds`, derived again as the ledger's tests do."
    exp = REGISTRY[name]
    return exp.derived(exp.claims[key].mutations[mutation](ds))


def _nan(*names, index=None):
    "A mutation: `names` NaN, at one seed (`index`) or everywhere (None): a failed run."
    if index is not None: return claims.one_seed(lambda a: a * np.nan, *names, index=index)
    return claims.transform(lambda a: a * np.nan, *names)


def _status(name, key, ds, mutate=None):
    "The claim's verdict on `mutate(ds)` derived again (NaN warnings silenced), as the ledger's tests derive a mutation."
    import warnings
    exp = REGISTRY[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return exp.claims[key](exp.derived(mutate(ds)) if mutate else ds).status


# --- Moskalev et al. -------------------------------------------------------------------------------------------------

def test_orientations_far_apart_needs_the_copies_outside_the_tsne_neighbourhood():
    "A DA model whose orbits are merely spread more than IR's and WT's (the old partly) is not 'distant' any more."
    name, key = "moskalev_fig2", "orientations_far_apart"
    sets = _sets(name)
    assert _verdict(name, key, sets["cpu"]).status == "not"          # median rank 1-2: the copies sit beside their originals
    assert _verdict(name, key, sets["paper"]).status == "partly"     # median rank 41-67 > perplexity 30, ratio 0.53 < 1
    m = _mutated(name, key, "turned copies among their originals' nearest neighbours (ranks capped at 5)", sets["paper"])
    r = m.distance_ratio
    sd = lambda v: float(v.std("seed", ddof=1))
    old_partly = all(float((r.sel(model="DA") - r.sel(model=o)).mean()) > 2 * sd(r.sel(model="DA") - r.sel(model=o)) for o in ("IR", "WT"))
    assert old_partly, "the old partly (DA's ratio above IR's and WT's by 2 s.d.) held on this mutation"
    assert _claim(name, key)(m).status == "not"


def test_saliency_similarity_cannot_judge_one_seed():
    "IR − DA is judged against its s.d. over seeds: one seed gives 'cannot judge', as the criterion's words say."
    name, key = "moskalev_tab1", "saliency_similarity"
    ds = _sets(name)["cpu"]
    assert _verdict(name, key, ds).status == "partly"
    one = REGISTRY[name].derived(ds.isel(seed=[0]))
    v = _verdict(name, key, one)
    assert v.status == "cannot judge", v
    assert "one seed" in v.note and "cannot judge" in _claim(name, key).reproduced
    flipped = REGISTRY[name].derived(claims.roll("SI", dim="model")(ds.isel(seed=[0])))
    assert _verdict(name, key, flipped).status == "not"   # a rule that fails decides, one seed or not


def test_fig5_implementation_claims():
    claims_ = REGISTRY["moskalev_fig5"].claims
    assert claims_["si_target"].kind == claims_["prop_3_1"].kind == "implementation"
    assert claims_["spectral_decay"].kind == claims_["accuracy_drop"].kind == "claim"


def test_moskalev_regime():
    "Our regime beside the paper's: the paper profile's 300 epochs on 10,000 MNIST images is the paper's; mnist5k is not."
    for name in ("moskalev_fig2", "moskalev_tab1", "moskalev_fig5", "moskalev_fig4"):
        assert getattr(REGISTRY[name], "_regime", None) is not None, name
    for name, label, same in [("moskalev_tab1", "cpu", False), ("moskalev_tab1", "paper", True), ("moskalev_fig2", "paper", True),
                              ("moskalev_fig4", "long", False)]:   # fig4's long profile drifts toward patches, not FashionMNIST
        ours, paper, in_regime = REGISTRY[name]._regime(_sets(name)[label])
        assert in_regime is same, (name, label, ours)
        assert "300 epochs" in paper and "test accuracy" in ours


# the audit of NaN and of one-seed mutations: NaN in a seed is *cannot judge*, and partly holds in most seeds, not in the mean

@pytest.mark.parametrize("label", ["cpu", "paper"])
def test_weight_tying_most_accurate_cannot_judge_a_nan_seed(label):
    "One seed's accuracies NaN: the old rule averaged the other seeds (xarray skips NaN) and said reproduced."
    name, key = "moskalev_tab1", "weight_tying_most_accurate"
    ds = _sets(name)[label]
    nan = REGISTRY[name].derived(_nan("test_accuracy", index=0)(ds))
    a = nan.test_accuracy.mean("seed")                                          # the old rule: a mean over the seeds left
    assert all(float(a.sel(group=g, model="WT")) > max(float(a.sel(group=g, model=m)) for m in ("DA", "IR")) for g in a.group.values)
    assert _status(name, key, ds) == "reproduced" and _status(name, key, nan) == "cannot judge"


def test_regularisation_costs_accuracy_partly_needs_most_seeds():
    "A drop carried by one seed (IR more accurate in the others): the old partly (the mean over seeds) held; most seeds now."
    from diffgeo.experiments.moskalev_tab1 import one_seed_carries_drop
    name, key = "moskalev_tab1", "regularisation_costs_accuracy"
    for label, was in (("cpu", "partly"), ("paper", "reproduced")):
        ds = _sets(name)[label]
        assert _status(name, key, ds) == was
        m = REGISTRY[name].derived(one_seed_carries_drop(ds))
        drop = m.test_accuracy.sel(model="DA") - m.test_accuracy.sel(model="IR")
        assert (drop.mean("seed") > 0).all(), "the old partly (IR below DA in the mean over seeds in both groups) held"
        assert int((drop > 0).sum("seed").max()) == 1 and _claim(name, key)(m).status == "not"
        assert _status(name, key, ds, _nan("test_accuracy", index=1)) == "cannot judge"   # the old rule: partly (the mean of the rest)
    assert "most seeds" in _claim(name, key).partly


def test_distribution_invariance_words_say_every_seed():
    "The code for reproduced requires DA above IR and WT in every seed: its words say so."
    assert "DA's DI_f above IR's and WT's in every seed" in _claim("moskalev_tab1", "distribution_invariance").reproduced


def test_fig4_genuine_invariance_partly_needs_most_seeds():
    "DA's DI below IR's in all seeds but one, huge there: the old partly (WT and IR below DA in the mean over seeds) held."
    from diffgeo.experiments.moskalev_fig4 import da_below_ir_but_one_seed
    name, key = "moskalev_fig4", "genuine_invariance_holds"
    for label, ds in _sets(name).items():
        assert _status(name, key, ds) == "partly"
        m = REGISTRY[name].derived(da_below_ir_but_one_seed(ds))
        f = m.DI_f
        old = all(bool((f.sel(group=g, model=o).mean("seed") < f.sel(group=g, model="DA").mean("seed")).all())
                  for g in f.group.values for o in ("WT", "IR"))
        assert old and _claim(name, key)(m).status == "not", label
        assert _status(name, key, ds, _nan("DI", index=0)) == "cannot judge"      # the old rule: partly


def test_fig4_weight_tying_partly_needs_most_seeds():
    "WT ahead of DA in one seed only: the old partly (the mean over seeds ahead at most drifts) held."
    from diffgeo.experiments.moskalev_fig4 import wt_ahead_in_one_seed
    name, key = "moskalev_fig4", "weight_tying_keeps_accuracy"
    for label, ds in _sets(name).items():
        assert _status(name, key, ds) == "partly"
        m = REGISTRY[name].derived(wt_ahead_in_one_seed(ds))
        r = m.accuracy_ratio.sel(beta=(m.beta > 0) & (m.beta < 1))
        ahead = (r.sel(model="WT") - r.sel(model="DA")).mean("seed") > 0
        assert (2 * ahead.sum("beta") > ahead.sizes["beta"]).all(), "the old partly held"
        assert _claim(name, key)(m).status == "not", label


def test_fig4_deterioration_cannot_judge_all_nan():
    "DA's DI all NaN: the old criterion raised ('All-NaN slice encountered' in argmax over β); now cannot judge."
    name, key = "moskalev_fig4", "augmented_invariance_deteriorates"
    ds = _sets(name)["cpu"]
    nan = REGISTRY[name].derived(_nan("DI")(ds))
    with pytest.raises(ValueError, match="All-NaN"):
        nan.DI_f.sel(model="DA", group="rot4").mean("seed").argmax("beta")
    assert _claim(name, key)(nan).status == "cannot judge"
    assert _status(name, key, ds, _nan("DI", index=0)) == "cannot judge"


# --- Rousseau et al. -------------------------------------------------------------------------------------------------

def test_fit_threshold_is_the_binomial_sd_at_99_percent():
    from diffgeo.experiments import rousseau_spiral as rs
    assert rs._threshold(1000) == pytest.approx(0.99 - 2 * np.sqrt(0.99 * 0.01 / 1000))
    e = rs._euler(_sets("rousseau_spiral")["cpu"])
    acc, fits = e.accuracy.sel(model="unshared"), rs._fits(e).sel(model="unshared")
    assert float(acc.isel(seed=0)) == pytest.approx(0.983) and not bool(fits.isel(seed=0))   # fitted by the old, observed-accuracy s.d.


def test_regular_needs_every_seed():
    "The cpu run's domain-driven network fits on one seed of three: the old criterion said reproduced, the new says not."
    from diffgeo.experiments import rousseau_spiral as rs
    name, key = "rousseau_spiral", "regular"
    sets = _sets(name)
    assert {l: _verdict(name, key, ds).status for l, ds in sets.items()} == {"cpu": "not", "paper": "not", "paper (lam0p1)": "not"}
    c = _claim(name, key)
    passing = REGISTRY[name].derived(c.passes["domain-driven det ∇φ pulled to 1, its accuracy 99 % on every seed"](sets["cpu"]))
    assert c(passing).status == "reproduced"
    stalled = REGISTRY[name].derived(c.mutations["one seed stalled: every network's accuracy − 0.3 at the first seed"](passing))
    e = rs._euler(stalled)
    fits = rs._fits(e)
    span = (e.J_max - e.J_min).where(fits, np.inf)
    fitting = e.seed.values[fits.sel(model="domain-driven").values]
    old = all(str(span.sel(seed=s).idxmin("model").item()) == "domain-driven" for s in fitting)
    assert len(fitting) == 2 and old, "the old rule (the smallest on every seed where it fits) held on the stalled seed's mutation"
    assert c(stalled).status == "not"


@pytest.mark.parametrize("key,statuses", [
    ("euler_scheme", {"cpu": "not", "paper": "not", "paper (lam0p1)": "not"}),
    ("shared_exponential", {"cpu": "partly", "paper": "partly", "paper (lam0p1)": "partly"}),
    ("inverse_consistency", {"cpu": "partly", "paper": "partly", "paper (lam0p1)": "partly"}),
    ("step_size", {"cpu": "partly", "paper": "partly", "paper (lam0p1)": "partly"}),
])
def test_rousseau_theory_on_the_reintegrations(key, statuses):
    "The paper's theory judged on the committed re-integrations of the trained fields (RK4, adaptive)."
    assert {l: _verdict("rousseau_spiral", key, ds).status for l, ds in _sets("rousseau_spiral").items()} == statuses


def test_step_size_is_capped():
    v = _verdict("rousseau_spiral", "step_size", _sets("rousseau_spiral")["paper"])
    assert "capped at partly" in v.rules and "✓ some Euler map folds" in v.rules


def test_rousseau_regime():
    "The cpu profile is the paper's recipe (x + F(x) per unit); the paper profile's horizon 1 is another regime."
    reg = REGISTRY["rousseau_spiral"]._regime
    assert reg(_sets("rousseau_spiral")["cpu"])[2] is True
    ours, paper, same = reg(_sets("rousseau_spiral")["paper"])
    assert same is False and "horizon 1" in ours and "x + F(x) per unit (Eq. 1)" in paper


def test_layers_needs_a_margin():
    "Trajectories permuted at random: every ratio ≈ 1; the old rule (below 1) said reproduced on cpu and partly on lam0p1."
    from diffgeo.experiments import rousseau_spiral as rs
    name, key = "rousseau_spiral", "layers"
    old = {}
    for label, ds in _sets(name).items():
        assert _status(name, key, ds) == "reproduced"
        m = REGISTRY[name].derived(rs.trajectory_permuted(ds))
        fits = rs._fits(rs._euler(m))
        both = (fits.sel(model=list(rs._CONSTRAINED)) & fits.sel(model="unshared")).values
        r = m.path_roughness
        ratio = (r.sel(model=list(rs._CONSTRAINED)) / r.sel(model="unshared")).transpose(*fits.sel(model=list(rs._CONSTRAINED)).dims).values[both]
        assert np.abs(ratio - 1).max() < 0.05
        k, n = int((ratio < 1).sum()), ratio.size
        old[label] = "reproduced" if k == n else "partly" if k > n / 2 else "not"
        assert _claim(name, key)(m).status == "not"
    assert old["cpu"] == "reproduced" and old["paper (lam0p1)"] == "partly"
    assert "0.8" in _claim(name, key).reproduced


@pytest.mark.parametrize("key", ["accuracy", "boundaries", "layers", "folds", "regular", "euler_scheme", "shared_exponential",
                                 "inverse_consistency", "extremes"])
def test_rousseau_nan_accuracy_cannot_judge(key):
    "Every accuracy NaN: the old `_fits` read NaN as 'does not fit', and layers, folds, inverse_consistency said not, shared_exponential partly."
    from diffgeo.experiments import rousseau_spiral as rs
    ds = _sets("rousseau_spiral")["cpu"]
    nan = REGISTRY["rousseau_spiral"].derived(_nan("accuracy")(ds))
    assert not (rs._euler(nan).accuracy >= rs._threshold(1000)).any()         # the old rule: no network fits
    assert _claim("rousseau_spiral", key)(nan).status == "cannot judge"


@pytest.mark.parametrize("var", ["accuracy", "trajectory"])
def test_rousseau_layers_cannot_judge_a_nan_seed(var):
    "One seed's accuracies or trajectories NaN: the old rule dropped its pairs (they 'do not fit') and said reproduced."
    for label, ds in _sets("rousseau_spiral").items():
        assert _status("rousseau_spiral", "layers", ds, _nan(var, index=0)) == "cannot judge", label


def test_step_size_cannot_judge_nan_det():
    "det ∇φ all NaN: the old derived folded fraction, (det ≤ 0).mean(), was 0, and step_size said not ('fold on 0 of 12')."
    ds = _sets("rousseau_spiral")["cpu"]
    assert float((ds.det * np.nan <= 0).mean()) == 0
    nan = REGISTRY["rousseau_spiral"].derived(_nan("det")(ds))
    assert nan.folded.isnull().all() and nan.J_min.isnull().all()
    for key in ("step_size", "folds", "regular", "shared_exponential", "extremes"):
        assert _claim("rousseau_spiral", key)(nan).status == "cannot judge", key


# --- Zavatone-Veth et al. --------------------------------------------------------------------------------------------

def test_fig3_triangle_is_capped_by_accuracy():
    "Fig. 3's triangle carries its siblings' accuracy cap: the cpu network at 51.6 % is held at partly."
    name, key = "zavatoneveth_fig3", "triangle"
    sets = _sets(name)
    v = _verdict(name, key, sets["cpu"])
    assert v.status == "partly" and "capped at partly" in v.note and "51.6" in v.note
    assert _verdict(name, key, sets["long"]).status == "reproduced"


def test_fig2_triangle_needs_a_significant_correlation():
    "r = +0.03 over the triangle's 496 points is not 'positively correlated': r must exceed 2 s.e."
    from diffgeo.experiments.zavatoneveth import triangle_correlation
    name, key = "zavatoneveth_fig2", "triangle"
    sets = _sets(name)
    r, se, n = triangle_correlation(sets["paper"])
    assert n == 496 and 0 < r < 2 * se
    assert _verdict(name, key, sets["paper"]).status == "not"      # the old criterion: partly
    c = _claim(name, key)
    passing = REGISTRY[name].derived(c.passes["the last log volume 10³ × (relative entropy + smallest weight)"](sets["paper"]))
    weak = _mutated(name, key, "the centre raised, the correlation with the entropy +0.03", passing)
    r, se, _ = triangle_correlation(weak)
    assert r == pytest.approx(0.03, abs=1e-9)
    from diffgeo.experiments.zavatoneveth import _corners_and_centre
    centre, corners = _corners_and_centre(weak, weak.plane_log_volume)
    gain = centre.mean("point") - corners.mean("point")
    assert float(gain.isel(epoch=-1)) > max(0, float(gain.isel(epoch=0)))  # the old rule: the centre raised, r > 0
    assert c(weak).status == "not"


def test_fig2_boundary_uses_the_mnist_control():
    "Fig. 2's boundary claim uses the paper's own MNIST contrast; the CIFAR-10 same-class control is reported, not required."
    from diffgeo.experiments.zavatoneveth import controls_bumped
    name, key = "zavatoneveth_fig2", "boundary_vs_control"
    sets = _sets(name)
    v = _verdict(name, key, sets["paper"])
    assert v.status == "reproduced" and "CIFAR-10" in v.note     # the old criterion: partly (a control expanded)
    bumped = REGISTRY[name].derived(controls_bumped(sets["paper"]))
    assert _verdict(name, key, bumped).status == "reproduced"     # the controls do not decide it
    assert _verdict(name, key, sets["cpu"]).status == "not"      # three segments do not resolve it


@pytest.mark.parametrize("name,key", [("zavatoneveth_fig2", "dirty_mnist"), ("zavatoneveth_fig3", "relu"),
                                      ("zavatoneveth_fig3", "self_supervised")])
def test_headline_claims_without_data_are_not_run(name, key):
    for ds in _sets(name).values():
        v = _verdict(name, key, ds)
        assert v.status == "not run" and v.note


@pytest.mark.parametrize("name", ["zavatoneveth_fig2", "zavatoneveth_fig3"])
@pytest.mark.parametrize("var", ["line_log_volume", "line_prob", "plane_prob"])
def test_zavatoneveth_derivations_propagate_nan(name, var):
    """One slice variable all NaN: the old derivations raised ('All-NaN slice encountered' in argmax); now they propagate
    NaN and every claim that reads it says cannot judge (the others keep their verdicts)."""
    import warnings
    exp = REGISTRY[name]
    dim = "cls" if var.endswith("prob") else "t"
    reads = {"line_log_volume": {"boundary_vs_control", "peak_at_boundary"},   # the last block's (Fig. 4's blocks have their own)
             "line_prob": {"boundary_vs_control", "peak_at_boundary", "blocks_near_boundary"},
             "plane_prob": {"triangle"}}[var]
    for label, ds in _sets(name).items():
        bad = _nan(var)(ds)
        with pytest.raises(ValueError, match="All-NaN"): bad[var].argmax(dim)   # what the old slice_derive called
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            nan = exp.derived(bad)
        for key, c in exp.claims.items():
            before, after = c(ds).status, c(nan).status
            if key in reads: assert after == "cannot judge" or before == after == "not run", (label, key, before, after)
            else: assert after == before, (label, key, before, after)


def test_nan_argmax():
    import xarray as xr
    from diffgeo.experiments.zavatoneveth import at_position, nan_argmax
    v = xr.DataArray([[0.0, 2.0, 1.0], [np.nan, 1.0, 3.0], [np.nan] * 3], dims=("line", "t"), coords={"t": [0.0, 0.5, 1.0]})
    i = nan_argmax(v, "t")
    assert np.isnan(i.values[1:]).all() and i.values[0] == 1                  # a NaN in the slice: no peak
    assert nan_argmax(v.isel(line=[0]), "t").dtype.kind == "i"                 # argmax's integers where nothing is NaN
    np.testing.assert_array_equal(at_position(v.t, "t", i).values, [0.5, np.nan, np.nan])


def test_zavatoneveth_regime():
    fig2, fig3 = REGISTRY["zavatoneveth_fig2"]._regime, REGISTRY["zavatoneveth_fig3"]._regime
    assert fig2(_sets("zavatoneveth_fig2")["paper"])[2] is True and fig2(_sets("zavatoneveth_fig2")["cpu"])[2] is False
    assert all(fig3(ds)[2] is False for ds in _sets("zavatoneveth_fig3").values())


# --- Moskalev et al.: the criteria written in the claims vocabulary --------------------------------------------------

_MOSKALEV_RULED = {"moskalev_fig2": {"within_class": {"cpu": "reproduced", "paper": "reproduced"}},
                   "moskalev_fig4": {"augmented_invariance_deteriorates": {"cpu": "partly", "long": "partly"},
                                     "regularised_keeps_accuracy": {"cpu": "not", "long": "not"}},
                   "moskalev_fig5": {"spectral_decay": {"cpu": "partly"}, "accuracy_drop": {"cpu": "partly"},
                                     "si_target": {"cpu": "not"}, "prop_3_1": {"cpu": "reproduced"}},
                   "moskalev_tab1": {k: {"cpu": s, "paper": p, "paper (ir_nu_wide)": p} for k, s, p in (
                       ("logit_invariance", "partly", "reproduced"), ("distribution_invariance", "partly", "reproduced"),
                       ("weight_tying_most_accurate", "reproduced", "reproduced"), ("fig1_saliency", "reproduced", "reproduced"),
                       ("fig3_saliency", "reproduced", "reproduced"))}}


@pytest.mark.parametrize("name", sorted(_MOSKALEV_RULED))
def test_moskalev_vocabulary_verdicts_unchanged(name):
    "The verdicts the hand-written criteria gave on the committed datasets, now with each rule and its numbers in `rules`."
    sets = _sets(name)
    for key, want in _MOSKALEV_RULED[name].items():
        for label, status in want.items():
            v = _verdict(name, key, sets[label])
            assert v.status == status and v.rules.startswith("reproduced: "), (key, label, v)


@pytest.mark.parametrize("name, key, var", [("moskalev_fig2", "within_class", "neighbour_agrees"),
    ("moskalev_fig4", "augmented_invariance_deteriorates", "DI"), ("moskalev_fig4", "regularised_keeps_accuracy", "orbit_correct"),
    ("moskalev_fig5", "spectral_decay", "sigma"), ("moskalev_fig5", "accuracy_drop", "test_accuracy"), ("moskalev_fig5", "si_target", "SI_f"),
    ("moskalev_tab1", "logit_invariance", "LI"), ("moskalev_tab1", "distribution_invariance", "DI"),
    ("moskalev_tab1", "weight_tying_most_accurate", "test_accuracy")])
def test_moskalev_nan_seed_cannot_judge(name, key, var):
    "One seed's run NaN: cannot judge, never a verdict on the other seeds (accuracy_drop's old mean over seeds skipped it: partly)."
    assert _status(name, key, _sets(name)["cpu"], _nan(var, index=0)) == "cannot judge"


def test_moskalev_prop_3_1_nan_step_cannot_judge():
    "A NaN σ_max(W) at one step: the old maximum over steps skipped it; now cannot judge."
    name, key = "moskalev_fig5", "prop_3_1"
    ds = _sets(name)["cpu"].copy()
    a = ds.linear_sigma.values.copy(); a[..., 5] = np.nan
    assert _verdict(name, key, ds.assign(linear_sigma=ds.linear_sigma.copy(data=a))).status == "cannot judge"


# --- Rousseau and Zavatone-Veth: the criteria written in the claims vocabulary ------------------------------------------

_VOCABULARY = {"rousseau_spiral": ("boundaries", "extremes", "folds"), "zavatoneveth_fig1": ("boundary", "radial", "width"),
               "zavatoneveth_fig2": ("accuracy", "peak_at_boundary"),
               "zavatoneveth_fig3": ("accuracy", "block_contrast", "blocks_near_boundary", "boundary_vs_control"),
               "zavatoneveth_fige1": ("convergence", "cubic_curvature", "erf_curvature")}


@pytest.mark.parametrize("name", sorted(_VOCABULARY))
def test_rousseau_zavatoneveth_verdicts_carry_their_rules(name):
    "Every verdict these criteria reach on a committed dataset records its rules, each judged (✓ or ✗), with its numbers."
    for label, ds in _sets(name).items():
        for key in _VOCABULARY[name]:
            v = _verdict(name, key, ds)
            if v.status in ("reproduced", "partly", "not"):
                assert v.rules.startswith("reproduced: ✓") or v.rules.startswith("reproduced: ✗"), (label, key, v.rules)
                assert "?" not in v.rules.split(";")[0][:14], (label, key, v.rules)


def test_rousseau_extremes_a_network_that_never_fits_is_not():
    "A network that fits on no seed has no median J_min/J_max: the criterion says not (its fit rule fails), not cannot judge."
    from diffgeo.experiments import rousseau_spiral as rs
    bad = rs._assign(_sets("rousseau_spiral")["paper"], "accuracy", "domain-driven", lambda a: a * 0)
    v = _verdict("rousseau_spiral", "extremes", bad)
    assert v.status == "not" and "✗ fits on some seed" in v.rules
    assert _verdict("rousseau_spiral", "folds", bad).status == "not"        # 2 of 4 networks with the paper's sign: below 3


def _nan_at(index):
    "A mutation: the value at `index` (a tuple of positions) of a variable NaN."
    def put(a):
        a = a.copy(); a[index] = np.nan
        return a
    return put


@pytest.mark.parametrize("name,var,index,keys,derive", [
    ("zavatoneveth_fige1", "log_volume_error", (0, 0), ("convergence",), False),    # derive's means over the points skip a NaN
    ("zavatoneveth_fige1", "ricci", (slice(None), -1, 0, 0, 0), ("erf_curvature", "cubic_curvature"), True),
    ("zavatoneveth_fig3", "line_block_log_volume", (-1, 0, 0, 0), ("block_contrast", "blocks_near_boundary"), True)])
def test_zavatoneveth_one_nan_cannot_be_judged(name, var, index, keys, derive):
    "One NaN among the values a criterion reads makes it cannot judge (the vocabulary's rules), never a verdict."
    for label, ds in _sets(name).items():
        for key in keys:
            before, mutate = _verdict(name, key, ds).status, claims.transform(_nan_at(index), var)
            after = _status(name, key, ds, mutate) if derive else _verdict(name, key, mutate(ds)).status
            assert after == "cannot judge" or before == after == "not run", (label, key, before, after)
