"""detlefsen_tab2 (Table 2, distorted MNIST): the equal-budget rule of §5 for the seven networks, bad names. The generator is
tested in test_distort, the notebook's smoke run and the committed result in test_experiments."""
import pytest
import torch

from diffgeo import models
from diffgeo.experiments import detlefsen_tab2 as tab2



@pytest.mark.parametrize("st_base", tab2.ST_BASE_CHOICES)
def test_table2_networks_share_one_budget(st_base):
    "§5: the seven networks have Table 1's 400K parameters within 0.5%, the ST ones giving some to localisation."
    counts = {}
    for name, (base, transformer, loc) in tab2.MODELS.items():
        m = tab2.build(name, st_base)
        counts[name] = models.n_params(m)
        assert abs(counts[name] / 400_000 - 1) < 0.005, (name, counts[name])
        assert (models.n_params(m.st) > 0) == (transformer is not None)
        assert m(torch.zeros(2, 1, 42, 42)).shape == (2, 10)
    assert max(counts.values()) / min(counts.values()) - 1 < 0.01


@pytest.mark.parametrize("base,in_shape", [("fcn", (1, 28, 28)), ("cnn", (1, 28, 28)), ("cifar", (3, 32, 32))])
def test_st_classifier_matches_the_budget_for_every_family(base, in_shape):
    "Every transformer of Table 3 on MNIST-like and CIFAR-like inputs; the chosen width is the closest one."
    budget = models.ST_BUDGETS[base]
    for transformer in models.ST_TRANSFORMERS:
        m = models.st_classifier(base, transformer, "cnn", in_shape)
        total, st = models.n_params(m), models.n_params(m.st)
        assert abs(total / budget - 1) < 0.005, (base, transformer, total)
        count = lambda w: st + models.n_params(models.st_base(base, in_shape, 10, w))
        assert abs(total - budget) <= min(abs(count(m.width - 1) - budget), abs(count(m.width + 1) - budget))
    m = models.st_classifier(base, "affine", "cnn", in_shape, budget=budget // 2)
    assert abs(models.n_params(m) / (budget // 2) - 1) < 0.01 and m.budget == budget // 2


def test_bad_names_fail_fast():
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'long', 'paper'"):
        tab2.EXPERIMENT.run(profile="laptop")
    with pytest.raises(ValueError, match="ST-Affine CNN"):
        tab2.EXPERIMENT.run("smoke", models=["ST-TPS CNN"])
    with pytest.raises(ValueError, match="'RTS', 'CPAB'"):
        tab2.EXPERIMENT.run("smoke", distortions=["elastic"])
    with pytest.raises(ValueError, match="'cnn', 'loc'"):
        tab2.build("CNN", st_base="fcn")
