"""Tests of fedcgd_task.datasets: digits split, CIFAR loading from a fake folder, clear errors."""

from __future__ import annotations

import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch

from fedcgd_task.datasets.images import load_cifar, load_digits_split


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
