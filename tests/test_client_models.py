"""Tests of fedcgd_task.models (architectures, parameter counts), fedcgd_task.datasets (CIFAR
from a fake folder, clear errors) and fedcgd_task.training (draws, local SGD, evaluation)."""

from __future__ import annotations

import math
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from channel.report import PAPER_CIFAR10_CNN_PARAMS
from fedcgd_config.settings import TrainingSettings
from fedcgd_task.datasets.images import load_cifar
from fedcgd_task.models import build_model, count_parameters
from fedcgd_task.training import dropout_seed, evaluate, local_batches, train_local


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


def test_the_cnn_cnn1d_and_resnet18gn_layers() -> None:
    cnn = build_model("cnn", 10, (3, 32, 32))
    convs = [m for m in cnn.modules() if isinstance(m, nn.Conv2d)]
    assert all(c.padding == (0, 0) and c.kernel_size == (3, 3) for c in convs)
    assert [m.p for m in cnn.modules() if isinstance(m, nn.Dropout)] == [0.2, 0.3]
    convs = [m for m in build_model("cnn1d", 10, (1, 40)).modules() if isinstance(m, nn.Conv1d)]
    assert [c.kernel_size for c in convs] == [(5,), (3,), (3,)]
    assert all(c.stride == (2,) and c.padding == (1,) and c.out_channels == 25 for c in convs)
    model = build_model("resnet18gn", 100, (3, 32, 32))
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
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


def test_a_missing_folder_gives_clear_error_and_an_archive_in_it_is_extracted_and_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torchvision.datasets.utils as tv_utils

    def offline(*args: object, **kwargs: object) -> None:
        raise OSError("network is unreachable")

    monkeypatch.setattr(tv_utils, "download_and_extract_archive", offline)
    for download in (False, True):
        with pytest.raises(FileNotFoundError) as info:
            load_cifar("cifar10", tmp_path / "nested", train=True, download=download)
        message = str(info.value)
        assert str(tmp_path / "nested") in message
        assert "cifar-10-python.tar.gz" in message and "cifar-10-batches-py" in message
        assert not (tmp_path / "nested").exists()
    monkeypatch.undo()  # the network as it is: an archive in the folder needs none
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
    rows = ours.tensors([5, 0, 5])  # chosen rows, repeats allowed
    assert torch.equal(rows[0], ours.tensors()[0][[5, 0, 5]]) and rows[1].tolist() == [5, 0, 5]
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


SEED = 9
TRAINING = TrainingSettings(local_steps=3, learning_rate=0.1, batch_size=4)


def test_batches_and_dropout_seeds_drawn_by_seed_round_partition() -> None:
    # 5 local samples, tau * b = 12 positions: the permutation read cyclically, so the first
    # 2 entries of the permutation appear 3 times and the other 3 appear twice.
    batches = local_batches(SEED, TRAINING, 5, server_round=2, partition_id=1)
    assert [b.size for b in batches] == [4, 4, 4]
    flat = np.concatenate(batches)
    np.testing.assert_array_equal(flat[:7], flat[5:12])
    assert sorted(flat[:5].tolist()) == [0, 1, 2, 3, 4]
    assert sorted(np.bincount(flat).tolist()) == [2, 2, 2, 3, 3]
    assert all(np.unique(b).size == b.size for b in batches)  # b <= num_local: no repeats
    a = local_batches(SEED, TRAINING, 100, 3, 2)
    for args, same in [((SEED, 3, 2), True), ((SEED, 4, 2), False), ((SEED, 3, 1), False),
                       ((10, 3, 2), False)]:  # fmt: skip
        other = local_batches(args[0], TRAINING, 100, *args[1:])
        assert all(np.array_equal(x, y) for x, y in zip(a, other, strict=True)) is same
    seeds = {dropout_seed(0, r, v) for r in range(5) for v in range(5)}  # the dropout stream
    assert len(seeds) == 25 and all(0 <= s < 2**63 for s in seeds)


def optimizer_train_local(
    model: nn.Module, x: torch.Tensor, y: torch.Tensor, batches: list[np.ndarray], lr: float,
    torch_seed: int,
) -> list[float]:  # fmt: skip
    """Local SGD as torch's optimizer does it: a gather per step, torch.manual_seed, SGD."""
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.0, weight_decay=0.0)
    losses = []
    model.train()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        for rows in batches:
            index = torch.from_numpy(rows)
            optimizer.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(model(x[index]), y[index])
            loss.backward()
            optimizer.step()
            losses.append(float(loss.detach()))
    return losses


@pytest.mark.parametrize(("name", "shape"), [("cnn", (3, 16, 16)), ("cnn1d", (1, 40))])
def test_train_local_bit_identical_to_the_optimizer_loop(name: str, shape: tuple[int, ...]) -> None:
    # train_local's sgd_step against torch.optim.SGD (no momentum, no weight decay). Dropout
    # (cnn) included: the masks come from the same seeded CPU generator. A frozen parameter has
    # no gradient and is left as it was.
    g = torch.Generator().manual_seed(123)
    x, y = torch.randn(20, *shape, generator=g), torch.randint(0, 4, (20,), generator=g)
    batches = [np.array([3, 1, 4, 15, 9]), np.array([2, 6, 5, 3, 5]), np.array([8, 9, 7, 19, 0])]
    seed = dropout_seed(4, 1, 2)
    reference, model = (build_model(name, 4, shape, seed=5) for _ in range(2))
    for m in (reference, model):
        next(m.parameters()).requires_grad_(False)
    losses = optimizer_train_local(reference, x, y, batches, 0.05, seed)
    rng_before = torch.random.get_rng_state()
    step_losses = train_local(model, x, y, batches, 0.05, torch_seed=seed)
    assert torch.equal(torch.random.get_rng_state(), rng_before)  # the global stream untouched
    assert step_losses == losses
    s0, s1 = reference.state_dict(), model.state_dict()
    assert all(torch.equal(s0[k], s1[k]) for k in s0)
    start = build_model(name, 4, shape, seed=5).state_dict()
    first = next(iter(start))
    assert torch.equal(s1[first], start[first])
    assert any(not torch.equal(s1[k], start[k]) for k in s1)
    if name == "cnn":  # another dropout seed, another result
        other = build_model(name, 4, shape, seed=5)
        next(other.parameters()).requires_grad_(False)
        train_local(other, x, y, batches, 0.05, torch_seed=dropout_seed(4, 1, 3))
        assert any(not torch.equal(other.state_dict()[k], s1[k]) for k in s1)


def test_evaluate_hand_computed() -> None:
    # Zero weights: every logit is 0, so CE = ln 2 = 0.693147 per sample and argmax picks
    # class 0; labels [0, 1, 0] -> accuracy 2 / 3.
    model = nn.Sequential(nn.Flatten(), nn.Linear(2, 2))
    nn.init.zeros_(model[1].weight)
    nn.init.zeros_(model[1].bias)
    x = torch.randn(3, 1, 1, 2)
    y = torch.tensor([0, 1, 0])
    loss, acc = evaluate(model, x, y, batch_size=2)
    assert loss == pytest.approx(math.log(2.0), rel=1e-6)
    assert acc == pytest.approx(2 / 3)
