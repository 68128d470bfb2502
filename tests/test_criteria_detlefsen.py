"""The Detlefsen criteria after the audit: their verdicts on every committed dataset, and on the mutations that tell the
new criteria from the old (a tie, one seed changed, the fine learning-rate grid). Each test names what the old
criterion said where it differs."""
import json
from pathlib import Path

import numpy as np
import pytest

from diffgeo import claims, site
from diffgeo.scaffold import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
site.experiments()
F3, F4, T2, T3 = (REGISTRY[f"detlefsen_{k}"] for k in ("fig3", "fig4", "tab2", "tab3"))


def _sets(exp):
    return claims.committed(exp, ROOT)


def _verdict(exp, key, ds, mutate=None):
    "The claim's verdict on `ds`, or on `mutate(ds)` derived again (as test_claims does)."
    return exp.claims[key](exp.derived(mutate(ds)) if mutate else ds)


#: claim -> {committed dataset: verdict}, after the audit (the old verdict in the comment where it differs)
EXPECTED = {
    (F3, "affine_destructive"): {"cpu": "not", "long": "reproduced", "long (fine)": "reproduced"},
    (F3, "invertible_never_fold"): {"cpu": "reproduced",
                                    "long": "not",                  # old: reproduced (folds only)
                                    "long (fine)": "partly"},       # old: reproduced
    (F3, "lr_robust"): {"cpu": "not", "long": "not",
                        "long (fine)": "partly"},                   # old: not
    (F4, "cpa_field"): {"cpu": "reproduced"},
    (F4, "diffeomorphic"): {"cpu": "reproduced"},
    (T2, "st_beats_plain"): {"cpu": "reproduced", "long": "reproduced"},
    (T2, "affine_cpab_best"): {"cpu": "partly", "long": "partly"},
    (T2, "designed_second"): {"cpu": "not", "long": "not"},
    (T2, "cnn_localisation"): {"cpu": "partly",
                               "long": "partly"},                   # old: not
    (T2, "cpab_cost"): {"cpu": "partly", "long": "not"},
    (T2, "accuracy_levels"): {"cpu": "not", "long": "not"},
    (T2, "fig5_zoom"): {"cpu": "reproduced", "long": "partly"},
    (T3, "mnist_gain"): {"cpu": "not", "long": "reproduced"},
    (T3, "cpab_best"): {"cpu": "partly",                            # old: reproduced
                        "long": "not"},                             # old: reproduced
    (T3, "affinediff_beats_affine"): {"cpu": "not", "long": "not"},  # new claim
    (T3, "fig6_convergence"): {"cpu": "not", "long": "not"},        # new claim
    (T3, "fashion_no_gain"): {"cpu": "not run", "long": "not run"},
    (T3, "cifar10_gain"): {"cpu": "not run", "long": "not"},
    (T3, "faces"): {"cpu": "not run", "long": "not run"},
}


@pytest.mark.parametrize("exp,key", list(EXPECTED), ids=lambda x: getattr(x, "name", x))
def test_verdicts_on_the_committed_datasets(exp, key):
    got = {label: claims.evaluate(exp.claims[key], ds).status for label, ds in _sets(exp).items()}
    assert got == EXPECTED[(exp, key)], f"{exp.name}:{key}: {got}"


def test_every_detlefsen_claim_is_graded_here():
    declared = {(e.name, k) for e in (F3, F4, T2, T3) for k in e.claims}
    assert declared == {(e.name, k) for e, k in EXPECTED}


# --- 1. invertible_never_fold: κ* applies to the invertible families too -----------------------------------------

_KAPPA_ONE_SEED = claims.one_seed(lambda c: 1000 * c, "cond")


@pytest.mark.parametrize("label", ["cpu", "long", "long (fine)"])
def test_a_map_beyond_kappa_star_is_destructive_for_an_invertible_family(label):
    """Every map's κ a thousandfold at the first seed: nothing folds, so the old criterion (det ≤ 0 only) said
    reproduced on every dataset; the new one counts the invertible maps beyond κ* as destructive: not."""
    v = _verdict(F3, "invertible_never_fold", _sets(F3)[label], _KAPPA_ONE_SEED)
    assert v.status == "not", v
    assert "beyond κ*" in v.note or "κ*" in v.note


def test_the_fine_grid_grades_cpab_apart():
    "On the fine grid CPAB's maps stay below κ* and AffineDiff's do not: partly, with both fractions in the rules."
    v = claims.evaluate(F3.claims["invertible_never_fold"], _sets(F3)["long (fine)"])
    assert v.status == "partly"
    assert "✗ fraction of the AffineDiff maps destructive" in v.rules and "✓ fraction of the CPAB maps destructive" in v.rules
    assert "3.63e+04" in v.value  # AffineDiff's largest κ, quoted


def test_the_invertible_maps_at_the_identity_pass():
    for label, ds in _sets(F3).items():
        make = F3.claims["invertible_never_fold"].passes["AffineDiff and CPAB maps the identity (κ 1, det 1) at every probe"]
        assert _verdict(F3, "invertible_never_fold", ds, make).status == "reproduced", label


# --- 2. lr_robust: CPAB alone is the partly rung ---------------------------------------------------------------

def test_lr_robust_on_the_fine_grid_is_partly_for_cpab_alone():
    "Old: not (it asked both invertible families for partly). CPAB leads Affine and TPS by +2.6 and +4.2 s.d.; AffineDiff −0.7 s.d. behind Affine."
    v = claims.evaluate(F3.claims["lr_robust"], _sets(F3)["long (fine)"])
    assert v.status == "partly"
    assert "✓ CPAB − Affine ahead by at least 2 s.d. (0.304, +2.6 s.d.)" in v.rules
    assert "✓ CPAB − TPS ahead by at least 2 s.d. (0.478, +4.2 s.d.)" in v.rules
    assert "✗ AffineDiff − Affine ahead by at least 2 s.d. (−0.053, -0.7 s.d.)" in v.rules


def test_lr_robust_with_cpab_and_affine_swapped_is_not():
    ds = _sets(F3)["long (fine)"]
    assert _verdict(F3, "lr_robust", ds, F3.claims["lr_robust"].mutations["CPAB and Affine accuracies swapped"]).status == "not"


def test_lr_robust_with_one_seed_of_cpab_at_chance_is_not():
    "One seed changed: CPAB's first seed at chance at every rate of the fine grid takes its lead below 2 s.d."
    def cpab_seed0_chance(ds):
        ds = ds.copy()
        a = ds.test_accuracy.copy(deep=True)
        a.loc[dict(family="cpab", seed=int(ds.seed[0]))] = 0.1
        ds["test_accuracy"] = a
        return ds
    assert _verdict(F3, "lr_robust", _sets(F3)["long (fine)"], cpab_seed0_chance).status == "not"


# --- 3. tab3 cpab_best: best means ahead by 2 s.d.; a tie is at most partly -------------------------------------

@pytest.mark.parametrize("label", ["cpu", "long"])
def test_a_tie_is_not_best(label):
    "The best non-CPAB network given the best CPAB network's accuracies: the old criterion (non-inferiority) said reproduced."
    ds = _sets(T3)[label]
    tie = T3.claims["cpab_best"].mutations["a tie: the best non-CPAB network given the best CPAB network's accuracies"]
    assert _verdict(T3, "cpab_best", ds, tie).status == "not"


def test_the_papers_own_table_3_is_a_tie_on_mnist():
    "Table 3 prints ST-Affine+CPAB and ST-TPS at 0.996 on MNIST: at three digits no CPAB network is ahead there (old: reproduced)."
    as_paper = T3.claims["mnist_gain"].passes["Table 3's accuracies on 10,000 test images"]
    for label, ds in _sets(T3).items():
        assert _verdict(T3, "cpab_best", ds, as_paper).status == "not", label
        assert _verdict(T3, "affinediff_beats_affine", ds, as_paper).status == "partly", label   # ahead in every column, within 2 s.d.


def test_best_within_the_noise_is_partly():
    "cpu: ST-Affine+CPAB highest on MNIST-5k, 0.6 s.d. over ST-Affine: partly (old: reproduced)."
    v = claims.evaluate(T3.claims["cpab_best"], _sets(T3)["cpu"])
    assert v.status == "partly" and "+0.6 s.d." in v.value


def test_cpab_networks_clearly_ahead_are_best():
    for label, ds in _sets(T3).items():
        assert _verdict(T3, "cpab_best", ds, T3.claims["cpab_best"].passes["the CPAB networks 5 points higher"]).status == "reproduced", label


# --- 4. tab2 cnn_localisation: no gap in the ladder ------------------------------------------------------------

def test_cnn_localisation_ahead_in_every_pair_is_partly():
    "long: the CNN localisation net ahead in all four pairs, mean +1.8 s.d.: the old ladder said not."
    v = claims.evaluate(T2.claims["cnn_localisation"], _sets(T2)["long"])
    assert v.status == "partly" and "4 of 4 pairs" in v.rules


@pytest.mark.parametrize("label", ["cpu", "long"])
def test_cnn_localisation_swapped_is_not(label):
    swap = T2.claims["cnn_localisation"].mutations["CNN and FCN localisation swapped"]
    assert _verdict(T2, "cnn_localisation", _sets(T2)[label], swap).status == "not"


# --- 5. tab2 affine_cpab_best: every other network, not the runner-up only ---------------------------------------

def _paper_with_a_noisy_third(ds):
    """Table 2's accuracies, but FCN 0.5 points below ST-Affine+CPAB CNN with a seed spread of ±0.8 points: the runner-up
    (ST-Affine CNN / ST-CPAB CNN) is 3.7 / 3.0 s.d. behind, FCN about 1 s.d. The old criterion, which weighed the
    runner-up only, said reproduced."""
    ds = T2.claims["affine_cpab_best"].passes["Table 2's accuracies on 10,000 test digits"](ds)
    a = ds.test_accuracy.copy(deep=True)
    best = ds.test_accuracy.sel(model="ST-Affine+CPAB CNN").mean("seed")
    a.loc[dict(model="FCN")] = (best - 0.005).values[:, None] + np.linspace(-0.008, 0.008, ds.sizes["seed"])[None, :]
    ds["test_accuracy"] = a
    return ds


def test_affine_cpab_best_weighs_every_other_network():
    v = _verdict(T2, "affine_cpab_best", _sets(T2)["long"], _paper_with_a_noisy_third)
    assert v.status == "partly", v
    assert "RTS: 0.996, +0.5 points over FCN (+1.1 s.d., the closest of the six" in v.value


def test_affine_cpab_best_on_the_long_run_names_the_closest_network():
    "long, RTS: ST-Affine CNN is 1.9 s.d. behind (the old value quoted the runner-up ST-CPAB CNN at +3.2 s.d.)."
    v = claims.evaluate(T2.claims["affine_cpab_best"], _sets(T2)["long"])
    assert "RTS: 0.983, +0.7 points over ST-Affine CNN (+1.9 s.d." in v.value


def test_one_seed_of_affine_cpab_at_chance_is_not_best():
    def seed0_chance(ds):
        ds = ds.copy()
        a = ds.test_accuracy.copy(deep=True)
        a.loc[dict(model="ST-Affine+CPAB CNN", seed=int(ds.seed[0]))] = 0.1
        ds["test_accuracy"] = a
        return ds
    assert _verdict(T2, "affine_cpab_best", _sets(T2)["long"], seed0_chance).status == "not"


# --- 6. properties of our implementation ------------------------------------------------------------------------

def test_implementation_claims():
    kinds = {c.id: c.kind for e in (F3, F4, T2, T3) for c in e.claims.values()}
    impl = {k for k, v in kinds.items() if v == "implementation"}
    assert impl == {"detlefsen_fig4:cpa_field", "detlefsen_fig4:diffeomorphic", "detlefsen_tab2:cpab_cost"}


# --- 7. the headline claims added -------------------------------------------------------------------------------

def test_affinediff_beats_affine():
    c = T3.claims["affinediff_beats_affine"]
    for label, ds in _sets(T3).items():
        passed = _verdict(T3, "affinediff_beats_affine", ds, c.passes["ST-AffineDiff 2 points higher"])
        assert passed.status == "reproduced", label

        def raised_then_one_seed_at_chance(d):   # one seed changed: AffineDiff's first seed at chance
            d = c.passes["ST-AffineDiff 2 points higher"](d)
            a = d.test_accuracy.copy(deep=True)
            a.loc[dict(model="ST-AffineDiff", seed=int(d.seed[0]))] = 0.1
            d["test_accuracy"] = a
            return d
        assert _verdict(T3, "affinediff_beats_affine", ds, raised_then_one_seed_at_chance).status == "not", label


def test_fig6_convergence_is_read_from_the_epochs_in_another_regime():
    c = T3.claims["fig6_convergence"]
    for label, ds in _sets(T3).items():
        v = claims.evaluate(c, ds)
        assert v.in_regime is False and "LFW" in v.paper_regime
        make = c.passes["the plain CNN 5 points ahead of the transformers' mean after the first epoch, 5 behind after the last"]
        assert _verdict(T3, "fig6_convergence", ds, make).status == "reproduced", label
        assert _verdict(T3, "fig6_convergence", ds, lambda d: c.mutations["epochs reversed"](make(d))).status == "not", label
    cpu = claims.evaluate(c, _sets(T3)["cpu"])   # the slower start is there on MNIST-5k, the better end is not
    assert "✓ mnist5k: the plain CNN − the transformers' mean after epoch 1" in cpu.rules


# --- the regimes ------------------------------------------------------------------------------------------------

def test_every_detlefsen_experiment_declares_its_regime():
    for exp in (F3, F4, T2, T3):
        assert getattr(exp, "_regime", None) is not None, exp.name
        for label, ds in _sets(exp).items():
            ours, paper, same = exp._regime(ds)
            assert ours and paper and isinstance(same, bool), (exp.name, label)
            assert same == (exp is F4), (exp.name, label, ours)   # only Fig. 4's [2, 2] tessellation is the paper's


def test_tab2_regime_is_the_papers_at_its_training_length():
    ds = _sets(T2)["long"].copy()
    p = json.loads(ds.attrs["parameters"])
    ds.attrs = {**ds.attrs, "parameters": json.dumps({**p, "epochs": 100, "lr": 1e-4})}
    ours, _, same = T2._regime(ds)
    assert same and "100 epochs of 50,000" in ours
