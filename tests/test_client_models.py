"""Tests of fedcgd_task.models (architectures, parameter counts) and fedcgd_task.datasets (digits
split, CIFAR loading from a fake folder, clear errors)."""

from __future__ import annotations

import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from channel.report import PAPER_CIFAR10_CNN_PARAMS
from fedcgd_task.datasets.images import load_cifar, load_digits_split
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


def test_tensors_subset_rows() -> None:
    train, _ = load_digits_split()
    x, y = train.tensors([5, 0, 5])
    full_x, full_y = train.tensors()
    torch.testing.assert_close(x, full_x[[5, 0, 5]])
    assert y.tolist() == [int(full_y[5]), int(full_y[0]), int(full_y[5])]


def write_fake_cifar10(root: Path, per_batch: int = 4) -> None:
    """Write a tiny cifar-10-batches-py folder in torchvision's pickle format."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    data = np.zeros((per_batch, 3 * 32 * 32), dtype=np.uint8)
    data[:, :1024], data[:, 2048:] = 255, 128  # channel-major rows: red 255, green 0, blue 128
    for k, name in enumerate([*(f"data_batch_{i}" for i in range(1, 6)), "test_batch"]):
        labels = [(k + i) % 10 for i in range(per_batch)]
        (folder / name).write_bytes(pickle.dumps({"data": data, "labels": labels}))
    meta = {"label_names": [f"class{i}" for i in range(10)]}
    (folder / "batches.meta").write_bytes(pickle.dumps(meta))


@pytest.mark.parametrize("download", [False, True])
def test_a_missing_folder_gives_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, download: bool
) -> None:
    import torchvision.datasets.utils as tv_utils

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("network is unreachable")

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", offline)
    with pytest.raises(FileNotFoundError) as info:
        load_cifar("cifar10", tmp_path / "nested", train=True, download=download)
    message = str(info.value)
    assert str(tmp_path / "nested") in message
    assert "cifar-10-python.tar.gz" in message and "cifar-10-batches-py" in message
    assert not (tmp_path / "nested").exists()


def test_an_archive_in_the_data_folder_is_extracted_and_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchvision.datasets.utils as tv_utils

    write_fake_cifar10(tmp_path / "made")
    with tarfile.open(tmp_path / "cifar-10-python.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "made" / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    # The fake archive cannot match the official checksum: accept the file that is there.
    monkeypatch.setattr(tv_utils, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    train = load_cifar("cifar10", tmp_path, train=True, download=True)
    assert len(train) == 20 and train.labels.tolist()[:4] == [0, 1, 2, 3]


def test_extracted_folder_is_read_without_checksums_normalised_and_equals_torchvision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Our reader (no MD5: generated or re-packed files in torchvision's format load) against
    # torchvision's own reader of the same files (its checksum test switched off).
    import torchvision.datasets as tv_datasets
    import torchvision.datasets.cifar as tv_cifar

    write_fake_cifar10(tmp_path, per_batch=6)
    ours = load_cifar("cifar10", tmp_path, train=True, download=False)
    test = load_cifar("cifar10", tmp_path, train=False, download=False)
    assert len(ours) == 30 and len(test) == 6
    assert ours.input_shape == (3, 32, 32) and ours.num_classes == 10
    assert ours.labels.tolist()[:4] == [0, 1, 2, 3]
    x, y = test.tensors()
    assert x.shape == (6, 3, 32, 32) and y.dtype == torch.int64
    # red 255 -> (1 - 0.4914) / 0.2470 = 2.05911; green 0 -> -0.4822 / 0.2435 = -1.98029;
    # blue 128 -> (0.501961 - 0.4465) / 0.2616 = 0.0554608 / 0.2616 = 0.212006.
    for channel, value in enumerate([2.059109, -1.980287, 0.212006]):
        torch.testing.assert_close(x[:, channel], torch.full((6, 32, 32), value), atol=1e-5, rtol=0)
    monkeypatch.setattr(tv_cifar, "check_integrity", lambda fpath, md5=None: os.path.isfile(fpath))
    theirs = tv_datasets.CIFAR10(root=str(tmp_path), train=True, download=False)
    np.testing.assert_array_equal(ours.inputs.pixels, np.asarray(theirs.data).transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(ours.labels, np.asarray(theirs.targets))
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="data_batch_3"):
        load_cifar("cifar10", tmp_path, train=True, download=False)
