"""Table 3 (seven classifiers, one budget): papermill smoke run, the committed cpu-profile result, models and the paper's table."""

import pytest

from diffgeo import models
from diffgeo.experiments import detlefsen_tab3 as tab3


VARIABLES = {"test_accuracy", "train_seconds", "n_params", "width", "n_train", "n_test", "train_loss", "train_error",
             "test_accuracy_epoch", "data_source", "paper_accuracy", "paper_table", "accuracy_mean", "accuracy_se", "train_seconds_mean",
             "gain_over_cnn", "minus_paper"}


def test_models_share_the_budget():
    "Every Table 3 network of a data set has the Table 1 budget (to within the classifier's integer width)."
    for dataset, shape in (("mnist5k", (1, 28, 28)), ("cifar10", (3, 32, 32))):
        budget = models.ST_BUDGETS[tab3.BASES[dataset]]
        for m in tab3.MODELS:
            assert abs(models.n_params(tab3.build(m, dataset, shape)) - budget) < 2_000, (dataset, m)


def test_paper_table_and_bad_names():
    assert all(len(v) == len(tab3.PAPER_COLUMNS) for v in tab3.PAPER.values()) and list(tab3.PAPER) == list(tab3.MODELS)
    assert tab3.PAPER["ST-CPAB"][tab3.PAPER_COLUMNS.index("cifar10")] == 0.895
    with pytest.raises(ValueError, match="'smoke', 'cpu', 'long', 'paper'"):
        tab3.EXPERIMENT.run("laptop")
    with pytest.raises(ValueError, match="'mnist5k', 'mnist', 'fashionmnist', 'cifar10'"):
        tab3.EXPERIMENT.run("smoke", datasets=["cifar100"])
    with pytest.raises(ValueError, match="'No transformer'"):
        tab3.EXPERIMENT.run("smoke", models=["ST-Similarity"])


def test_missing_data_set_is_skipped(tmp_path, monkeypatch):
    "With skip_missing, a data set absent from the data folder is dropped and named, not fatal."
    monkeypatch.delenv("DIFFGEO_DATA", raising=False)
    ds = tab3.EXPERIMENT.run("smoke", datasets=["mnist5k", "fashionmnist"], data_root=str(tmp_path / "empty"), models=["No transformer"],
                  skip_missing=True, work_dir=str(tmp_path))
    assert list(ds.dataset.values) == ["mnist5k"] and ds.attrs["skipped_datasets"] == "fashionmnist"
