"""Training: the loss goes down on a tiny set, runs are deterministic and resumable, bad inputs fail clearly."""
import pytest
import torch
import xarray as xr
from torch import nn

from diffgeo import data, models, results, train


@pytest.fixture(scope="module")
def tiny():
    ds = data.load("mnist5k")
    fit, val = data.train_val_split(ds.train, 200, seed=0)
    return fit.subset(512, seed=0), val, ds


@pytest.mark.parametrize("arch", ["FullConnL2", "LeNet"])
def test_training_reduces_the_loss(tiny, arch):
    fit, val, ds = tiny
    torch.manual_seed(0)
    net = models.build(arch, in_channels=1, n_classes=10, size=28)
    before = train.evaluate(net, fit)["loss"]
    res = train.train(net, fit, val, epochs=8, optimizer=models.ARCHS[arch].optimizer, batch_size=64, flip=False,
                      fill=[-m / s for m, s in zip(ds.mean, ds.std)], progress=False)
    assert train.evaluate(res.model, fit)["loss"] < 0.7 * before
    assert set(res.history.data_vars) == {"train_loss", "train_error", "val_loss", "val_error", "lr", "seconds"}
    assert res.history.sizes["epoch"] == 8 and 1 <= res.best_epoch <= 8
    assert res.best_epoch == int(res.history.val_error.argmin("epoch")) + 1


def test_deterministic_and_resumable(tiny, tmp_path):
    fit, val, _ = tiny
    fit = fit.subset(128)
    def run(**kw):
        torch.manual_seed(1)
        return train.train(models.build("LeNet", 1, 10, 28), fit, val, epochs=3, batch_size=32, progress=False, **kw)
    a, b = run(), run()
    for p, q in zip(a.model.state_dict().values(), b.model.state_dict().values()): assert torch.equal(p, q)
    def stop(epoch, row):
        if epoch == 1: raise KeyboardInterrupt
    with pytest.raises(KeyboardInterrupt): run(checkpoint=tmp_path / "ck.pt", on_epoch=stop)
    c = run(checkpoint=tmp_path / "ck.pt")
    for p, q in zip(a.model.state_dict().values(), c.model.state_dict().values()): assert torch.equal(p, q)
    xr.testing.assert_identical(a.history.drop_vars("seconds"), c.history.drop_vars("seconds"))   # all but the wall clock
    d = run(checkpoint=tmp_path / "ck.pt")  # a finished checkpoint returns at once with the same result
    xr.testing.assert_identical(a.history.drop_vars("seconds"), d.history.drop_vars("seconds"))


def test_checkpoint_of_other_code_is_not_resumed_silently(tiny, tmp_path, monkeypatch, capsys):
    "A checkpoint records the code that wrote it; after an edit of the package, training restarts (by default), resumes on request, or stops."
    fit, val, _ = tiny
    fit = fit.subset(128)
    def run(**kw):
        torch.manual_seed(1)
        epochs = []
        train.train(models.build("LeNet", 1, 10, 28), fit, val, epochs=3, batch_size=32, progress=False,
                    on_epoch=lambda e, r: epochs.append(e), **kw)
        return epochs
    def stop(epoch, row):
        if epoch == 2: raise KeyboardInterrupt
    ck = tmp_path / "ck.pt"
    def interrupted():
        "A checkpoint after epoch 2 of 3, written by the code `results.code_version()` names now."
        ck.unlink(missing_ok=True)
        with pytest.raises(KeyboardInterrupt):
            train.train(models.build("LeNet", 1, 10, 28), fit, val, epochs=3, batch_size=32, progress=False, checkpoint=ck, on_epoch=stop)
    interrupted()
    assert torch.load(ck, weights_only=False)["code"] == results.code_version()
    assert run(checkpoint=ck) == [3]                           # the same code resumes
    interrupted()
    monkeypatch.setattr(results, "code_version", lambda: {"commit": "edited", "source_hash": "e" * 64})
    with pytest.raises(ValueError, match="written by other code .*code_changed='recompute'.*code_changed='reuse'"):
        run(checkpoint=ck, code_changed="error")
    with results.on_code_change("error"), pytest.raises(ValueError, match="other code"):
        run(checkpoint=ck)
    with results.on_code_change("reuse"):
        assert run(checkpoint=ck) == [3]                       # resumed, as asked
    interrupted()
    capsys.readouterr()
    monkeypatch.setattr(results, "code_version", lambda: {"commit": "edited again", "source_hash": "a" * 64})
    assert run(checkpoint=ck) == [1, 2, 3]                     # the default: trained afresh
    assert "training afresh (code_changed='reuse' resumes it)" in capsys.readouterr().out
    assert torch.load(ck, weights_only=False)["code"]["source_hash"] == "a" * 64


def test_cosine_schedule_reaches_zero_and_adam_is_flat(tiny):
    fit, _, _ = tiny
    fit = fit.subset(64)
    net = models.build("FullConnL2", 1, 10, 28)
    sgd = train.train(models.build("LeNet", 1, 10, 28), fit, epochs=2, batch_size=32, progress=False)
    adam = train.train(net, fit, epochs=2, optimizer="adam", batch_size=32, progress=False)
    assert sgd.history.lr.values[-1] == pytest.approx(0, abs=1e-12) and sgd.best_epoch == 2  # no validation: last epoch
    assert (adam.history.lr.values == 0.1).all()


def test_epochs_for_steps_keeps_steps_constant():
    for P in (500, 1000, 5000, 50_000):
        e = train.epochs_for_steps(10_000, P, 128)
        assert e * -(-P // 128) >= 10_000 > (e - 1) * -(-P // 128)


def test_augment():
    x = torch.rand(16, 3, 8, 8)
    g = torch.Generator().manual_seed(0)
    out = train.augment(x, g, pad=2, flip=True, fill=[1.0, 2.0, 3.0])
    assert out.shape == x.shape
    with pytest.raises(ValueError, match="one per channel"): train.augment(x, g, fill=[0.0, 1.0])


def test_bad_inputs(tiny):
    fit, val, _ = tiny
    net = models.build("LeNet", 1, 10, 28)
    with pytest.raises(ValueError, match="'sgd', 'adam'"): train.train(net, fit, optimizer="lbfgs")
    with pytest.raises(ValueError, match="'cosine', 'none'"): train.train(net, fit, schedule="step")
    with pytest.raises(TypeError, match="data.Split"): train.train(net, fit.images)
    with pytest.raises(ValueError, match="epochs"): train.train(net, fit, epochs=0)
    with pytest.raises(ValueError, match="lr"): train.train(net, fit, lr=-1)


def test_warmup_raises_the_learning_rate_linearly(tiny):
    fit, _, _ = tiny
    res = train.train(models.build("LeNet", 1, 10, 28), fit.subset(64), epochs=4, batch_size=32, schedule="none",
                      warmup=0.5, progress=False)
    lr = res.history.lr.values
    assert lr[0] < lr[1] and lr[1] == pytest.approx(0.1) and (lr[2:] == lr[1]).all()
    with pytest.raises(ValueError, match="warmup"):
        train.train(models.build("LeNet", 1, 10, 28), fit, warmup=2)


def test_evaluate_a_model_without_parameters():
    x = torch.zeros(6, 10, 2, 2); x[torch.arange(6), torch.arange(6) % 10] = 1.0
    split = data.Split(x, torch.arange(6) % 10)
    net = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
    assert train.evaluate(net, split)["error"] == 0.0 and net.training


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_training_epoch_waits_for_the_gpu_only_at_its_end():
    "One epoch of `train` on CUDA: no step reads a value back or copies from pageable memory (both wait for the GPU); only the epoch's sums are read at its end."
    import warnings
    from diffgeo import models, train
    dev = torch.device("cuda")
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(512, 1, 28, 28, generator=g).to(dev), torch.randint(10, (512,), generator=g).to(dev)
    net = models.build("LeNet", in_channels=1, n_classes=10, size=28).to(dev)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    scaler = torch.amp.GradScaler("cuda", enabled=False)
    aug = lambda im, gen: train.augment(im, gen, pad=2, flip=True)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            sums = train._epoch(net, opt, sched, scaler, (x, y), 64, aug, None, 0, 0, None)   # 8 steps
    finally:
        torch.cuda.set_sync_debug_mode("default")
    syncs = [w for w in seen if "synchroniz" in str(w.message)]
    assert len(syncs) <= 2, f"{len(syncs)} waits for the GPU in an epoch of 8 steps: {[str(w.message) for w in syncs[:3]]}"
    assert set(sums) >= {"train_loss", "train_error"}


def test_tracked_training_resumes_its_accuracies_and_seconds(tiny, tmp_path, monkeypatch):
    """train_tracked with a checkpoint: a run stopped after an epoch's accuracy was kept resumes with every earlier epoch's
    accuracy and the seconds already trained, and ends where an uninterrupted run does."""
    fit, val, _ = tiny
    fit, test = fit.subset(128), val.subset(64)
    def run(**kw):
        torch.manual_seed(1)
        return train.train_tracked(models.build("LeNet", 1, 10, 28), fit, test, True, epochs=3, batch_size=32, progress=False, **kw)
    whole, whole_seconds, whole_acc = run()
    ck, calls = tmp_path / "ck.pt", []
    real = train.evaluate
    def evaluate_then_stop(model, split, *a, **k):
        out = real(model, split, *a, **k)
        calls.append(1)
        if len(calls) == 2: raise KeyboardInterrupt                      # the second epoch's accuracy is measured, not kept
        return out
    monkeypatch.setattr(train, "evaluate", evaluate_then_stop)
    with pytest.raises(KeyboardInterrupt): run(checkpoint=ck)
    monkeypatch.setattr(train, "evaluate", real)
    kept = torch.load(train.tracked_file(ck), weights_only=False)
    assert set(kept["accuracy"]) == {1} and kept["seconds"] > 0
    res, seconds, acc = run(checkpoint=ck)
    assert set(acc) == {1, 3} and acc[1] == whole_acc[1] and acc[3] == whole_acc[3]    # epoch 2's was never kept
    assert seconds > kept["seconds"]
    xr.testing.assert_identical(res.history.drop_vars("seconds"), run()[0].history.drop_vars("seconds"))
