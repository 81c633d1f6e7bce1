"""Built-in image sets: scikit-learn's ``digits`` (1 x 8 x 8, pixel / 16, a fixed stratified
80 / 20 split) and CIFAR from torchvision's files in ``data-dir`` (downloaded once when absent),
read so that a crafted file cannot run code (docs/design.md, "Safe loading").
"""  # noqa: D205

from __future__ import annotations

import functools
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedcgd_config.imports import first_line
from fedcgd_task.datasets import DataSplit, NormalizedPixels

#: Seed and test share of the digits split, and its largest intensity.
DIGITS_SPLIT_SEED, DIGITS_TEST_FRACTION, DIGITS_MAX_INTENSITY = 0, 0.2, 16.0

#: Per data set: classes, per-channel mean and standard deviation of the training images.
CIFAR: dict[str, tuple[int, tuple[float, ...], tuple[float, ...]]] = {
    "cifar10": (10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": (100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
#: Largest CIFAR batch file read (bytes; the official ones are at most 155 MB).
MAX_CIFAR_FILE_BYTES = 256 * 2**20
#: The only globals a CIFAR batch file refers to (numpy 1 and 2, pickle protocols 2 to 5).
CIFAR_PICKLE_GLOBALS: frozenset[tuple[str, str]] = frozenset(
    {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy.core.numeric", "_frombuffer"),
        ("numpy._core.numeric", "_frombuffer"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("_codecs", "encode"),
    }
)


def load_digits_split() -> tuple[DataSplit, DataSplit]:
    """scikit-learn's digits, split 80 / 20, stratified, with split seed 0 (rows sorted)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    pixels = np.asarray(bunch.images, dtype=np.uint8).reshape(-1, 1, 8, 8)
    labels = np.asarray(bunch.target, dtype=np.int64)
    rows = train_test_split(
        np.arange(labels.size),
        test_size=DIGITS_TEST_FRACTION,
        random_state=DIGITS_SPLIT_SEED,
        stratify=labels,
    )
    train, test = (
        DataSplit(
            NormalizedPixels(pixels[r], 1.0 / DIGITS_MAX_INTENSITY, (0.0,), (1.0,)), labels[r], 10
        )
        for r in map(np.sort, rows)
    )
    return train, test


def digits_data() -> tuple[Any, ...]:
    """The ``digits`` data set under the data-set contract: 1437 + 360 images, C = 10."""
    train, test = load_digits_split()
    return (train.inputs, train.labels), (test.inputs, test.labels), 10


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that builds only what a CIFAR batch holds; any other global is refused."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle's hook
        if (module, name) in CIFAR_PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"it refers to {module}.{name}, which a CIFAR batch never holds (refused unread: "
            "only numpy arrays, lists, dicts, strings and numbers are built)"
        )


def _cifar_entry(path: Path, name: str) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Pixels [n, 3, 32, 32] and labels [n] of one CIFAR batch file, checked (ValueError)."""
    where = f"{name}: '{path}' is not a CIFAR batch"
    size = path.stat().st_size
    if size > MAX_CIFAR_FILE_BYTES:
        raise ValueError(f"{where}: it holds {size} bytes, more than {MAX_CIFAR_FILE_BYTES}")
    try:
        with path.open("rb") as fh:
            entry = CifarUnpickler(fh, encoding="latin1").load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"{where}: {first_line(err)}") from err
    if not isinstance(entry, dict):
        raise ValueError(f"{where}: it holds a {type(entry).__name__}, not a dict")
    entry = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}
    data = entry.get("data")
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2:
        kind = f"{data.dtype} {data.shape}" if isinstance(data, np.ndarray) else type(data)
        raise ValueError(f"{where}: its 'data' is {kind}, not a uint8 array [n, 3072]")
    if data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{where}: its 'data' has {data.shape[1]} values per image, not 3072")
    try:
        labels = np.asarray(entry.get("labels", entry.get("fine_labels")))
    except (ValueError, TypeError) as err:
        raise ValueError(f"{where}: its labels cannot be read ({first_line(err)})") from err
    if labels.dtype.kind not in "iu" or labels.shape != (data.shape[0],):
        raise ValueError(
            f"{where}: its labels are {labels.dtype} {labels.shape}, not {data.shape[0]} integers"
        )
    classes = CIFAR[name][0]
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"{where}: its labels leave [0, {classes})")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def load_cifar(name: str, data_dir: str | Path, *, train: bool, download: bool = True) -> DataSplit:
    """CIFAR-10 or CIFAR-100 (fine labels), pixels kept as uint8; without the extracted folder
    (and with ``download``) torchvision fetches and extracts the MD5-checked archive first."""  # noqa: D205, D209
    from torchvision.datasets import CIFAR10, CIFAR100  # their file names, URL and MD5

    root = Path(data_dir)
    official = CIFAR10 if name == "cifar10" else CIFAR100
    folder = root / official.base_folder
    if not folder.is_dir():
        created = next((p for p in (*reversed(root.parents), root) if not p.exists()), None)
        try:
            if not download:
                raise FileNotFoundError(folder)
            from torchvision.datasets import utils

            root.mkdir(parents=True, exist_ok=True)
            utils.download_and_extract_archive(
                official.url, str(root), filename=official.filename, md5=official.tgz_md5
            )
        except Exception as failed:  # offline, proxy, bad archive: "provide the files"
            if created is not None and download:
                shutil.rmtree(created, ignore_errors=True)
            raise FileNotFoundError(
                f"{name} files not found in data folder '{root}' and could not be downloaded. "
                f"Put the official '{official.filename}' (https://www.cs.toronto.edu/~kriz/"
                f"cifar.html) or its extracted '{official.base_folder}/' folder into '{root}' "
                "(run-config key 'data-dir'), or run once with network access so that it is "
                "downloaded there."
            ) from failed
    parts = []
    for file, _ in official.train_list if train else official.test_list:
        if not (folder / file).is_file():  # read without the MD5 check: re-packed files load
            raise FileNotFoundError(f"{name}: '{folder / file}' is missing from '{folder}'")
        parts.append(_cifar_entry(folder / file, name))
    pixels, targets = np.concatenate([p for p, _ in parts]), np.concatenate([y for _, y in parts])
    classes, mean, std = CIFAR[name]
    return DataSplit(NormalizedPixels(pixels, 1.0 / 255.0, mean, std), targets, classes)


def _cifar_data(name: str, data_dir: str) -> tuple[Any, ...]:
    """CIFAR-10 or CIFAR-100 from ``data_dir`` under the data-set contract (C = 10 or 100)."""
    train, test = (load_cifar(name, data_dir, train=t) for t in (True, False))
    return (train.inputs, train.labels), (test.inputs, test.labels), train.num_classes


#: The ``cifar10`` and ``cifar100`` data sets: 50,000 + 10,000 images each, read from data_dir.
cifar10_data = functools.partial(_cifar_data, "cifar10")
cifar100_data = functools.partial(_cifar_data, "cifar100")
