"""Tests of diffgeo.models: the architectures of Table 1 (Petrini et al. 2021, App. E.2).

Every network is built for 1x28x28 (MNIST) and 3x32x32 (CIFAR-10) images and run forward on a batch of two;
builds and forwards are small, so the whole file takes a few seconds on two CPU cores.
"""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from diffgeo.models import ARCHS, MIN_SIZE, ArchInfo, Dense, build, n_params, probe_layers, resolve_arch

NAMES = list(ARCHS)
INPUTS = [(1, 28), (3, 32)]  # (in_channels, size): MNIST-like and CIFAR-like
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA is not available")


def seeded_build(name, seed=0, **kwargs):
    torch.manual_seed(seed)
    return build(name, **kwargs)


def test_registry_follows_table_1():
    assert NAMES == ["FullConnL2", "FullConnL4", "FullConnL6", "LeNet", "AlexNet", "VGG11", "VGG11bn", "VGG16",
                     "VGG16bn", "VGG19", "VGG19bn", "ResNet18", "ResNet34", "ResNet50", "EfficientNetB0",
                     "EfficientNetB2"]
    assert all(isinstance(a, ArchInfo) and a.name == n for n, a in ARCHS.items())
    depths = {n: a.depth for n, a in ARCHS.items()}
    assert depths == {"FullConnL2": 2, "FullConnL4": 4, "FullConnL6": 6, "LeNet": 5, "AlexNet": 8,
                      "VGG11": 11, "VGG11bn": 11, "VGG16": 16, "VGG16bn": 16, "VGG19": 19, "VGG19bn": 19,
                      "ResNet18": 18, "ResNet34": 34, "ResNet50": 50, "EfficientNetB0": 18, "EfficientNetB2": 25}
    assert {a.family for a in ARCHS.values()} == {"FullConn", "LeNet", "AlexNet", "VGG", "ResNet", "EfficientNet"}
    assert {n for n, a in ARCHS.items() if a.batchnorm} == {"VGG11bn", "VGG16bn", "VGG19bn", "ResNet18", "ResNet34",
                                                            "ResNet50", "EfficientNetB0", "EfficientNetB2"}
    assert {n for n, a in ARCHS.items() if a.skip} == {"ResNet18", "ResNet34", "ResNet50", "EfficientNetB0",
                                                       "EfficientNetB2"}
    assert {n for n, a in ARCHS.items() if a.optimizer == "adam"} == {"FullConnL2", "FullConnL4", "FullConnL6"}
    assert {a.optimizer for a in ARCHS.values()} == {"adam", "sgd"}
    assert ARCHS["AlexNet"].paper_params == "23 M" and ARCHS["AlexNet"].paper_range == (23e6, 23e6)
    assert ARCHS["ResNet50"].paper_range == (11e6, 24e6)
    with pytest.raises(AttributeError):
        ARCHS["LeNet"].depth = 6  # frozen


@pytest.mark.parametrize("alias,name", [
    ("resnet18", "ResNet18"), ("RESNET50", "ResNet50"), ("vgg16_bn", "VGG16bn"), ("VGG-19-BN", "VGG19bn"),
    ("vgg11", "VGG11"), ("efficientnet_b0", "EfficientNetB0"), ("EfficientNet-B2", "EfficientNetB2"),
    ("FullConn-L4", "FullConnL4"), ("fullconn_l2", "FullConnL2"), ("lenet", "LeNet"), ("Alex Net", "AlexNet"),
])
def test_resolve_arch_aliases(alias, name):
    assert resolve_arch(alias) == name
    assert resolve_arch(name) == name


def test_resolve_arch_unknown_lists_valid_names():
    with pytest.raises(ValueError, match="unknown architecture 'ResNet101'") as err:
        resolve_arch("ResNet101")
    assert all(repr(n) in str(err.value) for n in NAMES)
    with pytest.raises(ValueError, match="valid values"):
        build("densenet121")
    with pytest.raises(TypeError, match="must be a string"):
        resolve_arch(18)


@pytest.mark.parametrize("kwargs,error,message", [
    (dict(in_channels=0), ValueError, "in_channels must be >= 1.*Use 1 for grey-scale"),
    (dict(in_channels=-3), ValueError, "in_channels must be >= 1"),
    (dict(in_channels=2.5), TypeError, "in_channels must be an integer"),
    (dict(in_channels=True), TypeError, "in_channels must be an integer"),
    (dict(in_channels="3"), TypeError, "in_channels must be an integer"),
    (dict(n_classes=0), ValueError, "n_classes must be >= 1"),
    (dict(n_classes=10.0), TypeError, "n_classes must be an integer"),
    (dict(size=27), ValueError, "size must be >= 28.*Valid sizes are 28"),
    (dict(size=0), ValueError, "Valid sizes are 28"),
    (dict(size=32.0), TypeError, "size must be an integer"),
    (dict(size=None), TypeError, "size must be an integer"),
])
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        build("LeNet", **kwargs)


def test_min_size():
    assert MIN_SIZE == 28


@pytest.mark.parametrize("in_channels,size", INPUTS)
@pytest.mark.parametrize("name", NAMES)
def test_forward_and_probe_hooks(name, in_channels, size):
    """Output [2, 10] and finite; every probe layer exists and its hook fires once, in order, in one forward;
    no later in-place operation (ReLU(inplace=True), `out += identity`) changes an output a hook has kept."""
    model = seeded_build(name, in_channels=in_channels, size=size)
    assert not any(p.is_cuda for p in model.parameters())
    assert n_params(model) > 0
    names = probe_layers(model)
    assert len(names) == len(set(names)) >= 2
    seen = []
    hooks = [model.get_submodule(n).register_forward_hook(lambda m, i, o, n=n: seen.append((n, o, o.clone())))
             for n in names]
    with torch.no_grad():
        y = model(torch.rand(2, in_channels, size, size, generator=torch.Generator().manual_seed(1)))
    for h in hooks:
        h.remove()
    assert y.shape == (2, 10) and torch.isfinite(y).all()
    assert [n for n, _, _ in seen] == names
    assert all(o.shape[0] == 2 and torch.isfinite(o).all() and torch.equal(o, kept) for _, o, kept in seen)
    assert torch.equal(seen[-1][1], y)  # the last probe is the output layer


@pytest.mark.parametrize("name", NAMES)
def test_params_match_table_1(name):
    """Parameter counts for 3x32x32 images and 10 classes lie within 0.5-2x of Table 1's (ranges: of its ends)."""
    low, high = ARCHS[name].paper_range
    assert 0.5 * low <= n_params(build(name)) <= 2 * high


def test_params_exact():
    """Counts worked out by hand from the layer shapes (3x32x32, 10 classes)."""
    fc = lambda depth: (3072 * 64 + 64) + (depth - 2) * (64 * 64 + 64) + 64 * 10
    assert [n_params(build(f"FullConnL{d}")) for d in (2, 4, 6)] == [fc(2), fc(4), fc(6)]
    lenet = (3 * 6 * 25 + 6) + (6 * 16 * 25 + 16) + (400 * 120 + 120) + (120 * 84 + 84) + (84 * 10 + 10)
    assert n_params(build("LeNet")) == lenet == 62006
    assert n_params(build("LeNet", in_channels=1, size=28)) == lenet - 2 * 6 * 25 - 144 * 120
    assert n_params(build("AlexNet")) == 23272266
    assert n_params(build("VGG11")) == 9225610
    assert n_params(build("ResNet18")) == 11173962
    assert n_params(build("ResNet50")) == 23520842


def test_n_params_counts_trainable_only():
    model = build("LeNet")
    model.conv1.requires_grad_(False)
    assert n_params(model) == 62006 - (3 * 6 * 25 + 6)
    assert n_params(nn.Linear(3, 2)) == 8


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_under_seed(name):
    """Same seed: same weights and buffers; another seed: different weights."""
    a, b, c = seeded_build(name, 0), seeded_build(name, 0), seeded_build(name, 1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys() and all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa if sa[k].is_floating_point())


@pytest.mark.parametrize("name", ["AlexNet", "EfficientNetB0", "EfficientNetB2"])
def test_training_forward_deterministic_under_seed(name):
    """The nets with dropout (and drop-connect) give the same training-mode output under the same seed."""
    model = seeded_build(name)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    outs = []
    for seed in (5, 5, 6):
        torch.manual_seed(seed)
        with torch.no_grad():
            outs.append(model(x))
    assert torch.equal(outs[0], outs[1]) and not torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("name", ["ResNet18", "VGG11bn", "EfficientNetB0", "AlexNet", "LeNet"])
def test_pytorch_default_init(name):
    """Weights follow PyTorch's default init, |w| <= 1/sqrt(fan_in) (as in the authors' code), not torchvision's."""
    for m in build(name).modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            fan_in = m.weight[0].numel()
            bound = 1 / math.sqrt(fan_in)  # drawn from U(-b, b) with b rounded once to the weight's dtype
            assert m.weight.abs().max() <= bound * (1 + torch.finfo(m.weight.dtype).eps)
        if isinstance(m, nn.BatchNorm2d):
            assert torch.equal(m.weight, torch.ones_like(m.weight)) and torch.equal(m.bias, torch.zeros_like(m.bias))


def test_dense_parametrisation():
    """Hidden layers: x W / sqrt(d) + b; readout: x W / d, no bias (the authors' DenseBlock)."""
    torch.manual_seed(0)
    hidden, readout = Dense(20, 5), Dense(5, 3, readout=True)
    assert hidden.weight.shape == (20, 5) and readout.bias is None
    x = torch.randn(4, 20)
    torch.testing.assert_close(hidden(x), x @ hidden.weight / math.sqrt(20) + hidden.bias)
    h = torch.randn(4, 5)
    torch.testing.assert_close(readout(h), h @ readout.weight / 5)
    assert [type(m).__name__ for m in build("FullConnL4").children()].count("Dense") == 4


@pytest.mark.parametrize("name", ["VGG11bn", "AlexNet"])
def test_28px_is_zero_padding_to_32px(name):
    """At 28 px the widened first-conv padding equals zero-padding the image to 32 px, as the authors do."""
    small, large = build(name, in_channels=1, size=28).eval(), build(name, in_channels=1, size=32).eval()
    large.load_state_dict(small.state_dict())
    x = torch.rand(2, 1, 28, 28)
    with torch.no_grad():
        torch.testing.assert_close(small(x), large(F.pad(x, (2, 2, 2, 2))))


@pytest.mark.parametrize("name", ["FullConnL2", "LeNet", "AlexNet", "VGG11", "ResNet18", "EfficientNetB0"])
def test_other_sizes_channels_classes(name):
    model = build(name, in_channels=2, n_classes=7, size=40)
    with torch.no_grad():
        y = model(torch.rand(2, 2, 40, 40))
    assert y.shape == (2, 7) and torch.isfinite(y).all()


@pytest.mark.kernel_free   # names and imports, no numerics: the portable kernel pass skips it
def test_probe_layers_names():
    assert probe_layers("FullConnL4") == ["relu1", "relu2", "relu3", "out"]
    assert probe_layers("fullconn_l2") == ["relu1", "out"]
    assert probe_layers("LeNet") == ["pool1", "pool2", "relu3", "relu4", "fc3"]
    assert len(probe_layers("AlexNet")) == 8
    assert [len(probe_layers(n)) for n in ("VGG11", "VGG16bn", "VGG19")] == [9, 14, 17]  # one per weight layer
    assert probe_layers("ResNet18")[:3] == ["relu", "layer1.0", "layer1.1"] and probe_layers("ResNet18")[-1] == "fc"
    assert len(probe_layers("ResNet50")) == 1 + 16 + 1
    assert len(probe_layers("EfficientNetB2")) == 1 + 23 + 1 + 1
    assert probe_layers("resnet34") == probe_layers(build("ResNet34", in_channels=1, size=28))


def test_probe_layers_errors():
    with pytest.raises(TypeError, match="nn.Module or an architecture name"):
        probe_layers(3)
    with pytest.raises(ValueError, match="no Conv2d or Linear"):
        probe_layers(nn.Sequential(nn.ReLU()))
    with pytest.raises(ValueError, match="unknown architecture"):
        probe_layers("ResNet101")


@CUDA
@pytest.mark.parametrize("name", ["FullConnL2", "VGG11bn", "ResNet18", "EfficientNetB0"])
def test_cuda_matches_cpu_weights(name):
    cpu = seeded_build(name)
    gpu = seeded_build(name).to("cuda")
    assert all(torch.equal(p.cpu(), q) for p, q in zip(gpu.parameters(), cpu.parameters()))
    with torch.no_grad():
        y = gpu.eval()(torch.rand(2, 3, 32, 32, device="cuda"))
    assert y.shape == (2, 10) and torch.isfinite(y).all()


@pytest.mark.kernel_free   # names and imports, no numerics: the portable kernel pass skips it
def test_importing_models_leaves_torchvision_alone():
    "diffgeo.models imports torchvision where a network needs it: importing it (every experiment notebook does) loads neither torchvision nor torch._dynamo."
    import subprocess, sys
    code = ("import sys, diffgeo.models, diffgeo.experiments.petrini_fig5; "
            "print(sorted(m for m in ('torchvision', 'torch._dynamo') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]", out
