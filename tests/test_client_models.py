"""Tests of fedcgd_task.models: architectures and parameter counts."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from channel.report import PAPER_CIFAR10_CNN_PARAMS
from fedcgd_task.models import build_model, count_parameters


@pytest.mark.parametrize(
    ("name", "classes", "shape", "count"),
    [
        # conv 3->32: 3*9*32 + 32 = 896; 32->32: 9,248; 32->64: 18,496; 64->64: 36,928;
        # 32 -> 30 -> 28 -> 14 -> 12 -> 10 -> 5: flatten 64*5*5 = 1600; fc 1600*120 + 120 =
        # 192,120; fc 120*10 + 10 = 1,210. Sum 258,898: the constant the torch-free code uses.
        ("cnn", 10, (3, 32, 32), PAPER_CIFAR10_CNN_PARAMS),
        # 20 -> 18 -> 16 -> 8 -> 6 -> 4 -> 2, flatten 256: (1*9*32 + 32) + 9,248 + 18,496
        # + 36,928 + (256*120 + 120) + (120*3 + 3) = 96,195.
        ("cnn", 3, (1, 20, 20), 96_195),
        ("mlp", 10, (1, 8, 8), 4_810),  # 64*64 + 64 + 64*10 + 10
        ("mlp", 10, (1, 40), 3_274),  # (1*40 + 1) * 64 + (64 + 1) * 10, MNIST-1D's inputs
        # Any input shape: 2 x 3 x 5 flatten to 30 features, (30 + 1) * 64 + (64 + 1) * 4.
        ("mlp", 4, (2, 3, 5), 2_244),
        ("mlp", 3, (7,), 707),  # (7 + 1) * 64 + (64 + 1) * 3
        # A length L becomes (L + 2 - k) // 2 + 1: 40 -> 19 (k 5) -> 10 (k 3) -> 5 (k 3);
        # (1*5*25 + 25) + (25*3*25 + 25) * 2 + (125*10 + 10) = 150 + 3,800 + 1,260.
        ("cnn1d", 10, (1, 40), 5_210),
        # 20 -> 9 -> 5 -> 3, flatten 75: (2*5*25 + 25) + 3,800 + (75*4 + 4) = 4,379.
        ("cnn1d", 4, (2, 20), 4_379),
        # torchvision's BatchNorm ResNet-18 with 100 classes: 11,176,512 + 512*100 + 100.
        ("resnet18gn", 100, (3, 32, 32), 11_227_812),
        # One input channel: the 7 x 7 stem has 1*49*64 = 3,136 weights instead of 9,408;
        # 11,176,512 - 6,272 + 512*10 + 10.
        ("resnet18gn", 10, (1, 16, 16), 11_175_370),
    ],
)
def test_parameter_counts_by_hand_and_output_shapes(
    name: str, classes: int, shape: tuple[int, ...], count: int
) -> None:
    model = build_model(name, classes, shape)
    assert count_parameters(model) == count
    assert model(torch.zeros(2, *shape)).shape == (2, classes)


def test_the_cnn_and_cnn1d_layers() -> None:
    cnn = build_model("cnn", 10, (3, 32, 32))
    convs = [m for m in cnn.modules() if isinstance(m, nn.Conv2d)]
    assert all(c.padding == (0, 0) and c.kernel_size == (3, 3) for c in convs)
    assert [m.p for m in cnn.modules() if isinstance(m, nn.Dropout)] == [0.2, 0.3]
    convs = [m for m in build_model("cnn1d", 10, (1, 40)).modules() if isinstance(m, nn.Conv1d)]
    assert [c.kernel_size for c in convs] == [(5,), (3,), (3,)]
    assert all(c.stride == (2,) and c.padding == (1,) and c.out_channels == 25 for c in convs)


def test_resnet18gn_has_no_batchnorm() -> None:
    model = build_model("resnet18gn", 100, (3, 32, 32))
    kinds = {type(m) for m in model.modules()}
    assert not any(issubclass(k, nn.modules.batchnorm._BatchNorm) for k in kinds)
    groups = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    # ResNet-18: stem 1 + 8 blocks * 2 + 3 downsample norms = 20 GroupNorm layers.
    assert len(groups) == 20 and all(g.num_groups == 32 for g in groups)


@pytest.mark.parametrize(
    ("name", "classes", "shape", "match"),
    [
        ("vgg", 10, (3, 32, 32), "vgg"),
        ("cnn", 10, (8, 8), r"\(8, 8\) is not \(channels, height, width\)"),
        ("cnn", 3, (1, 15, 15), "too small"),
        ("cnn1d", 10, (1, 8, 8), r"\(1, 8, 8\) is not \(channels, length\)"),
        ("cnn1d", 10, (1, 2), "at least 3"),
    ],
)
def test_bad_arguments(name: str, classes: int, shape: tuple[int, ...], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_model(name, classes, shape)
