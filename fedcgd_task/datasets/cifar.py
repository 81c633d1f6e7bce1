"""The built-in ``cifar10`` and ``cifar100`` data sets, read safely from the data folder.

torchvision's files in ``data-dir`` (one download is tried when absent), normalised per channel
with the usual training-set statistics; the batch files are read by :class:`CifarUnpickler`,
so a crafted ``data_batch_*`` cannot run code (docs/design.md, "Safe loading").
"""

from __future__ import annotations

import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from fedcgd_task.datasets.contract import LoadedData
from fedcgd_task.datasets.splits import ImageSet
from fedcgd_task.imports import first_line

#: Per-channel mean and standard deviation of the CIFAR-10 training images (pixel / 255).
CIFAR10_MEAN: tuple[float, float, float] = (0.4914, 0.4822, 0.4465)
CIFAR10_STD: tuple[float, float, float] = (0.2470, 0.2435, 0.2616)
#: Per-channel mean and standard deviation of the CIFAR-100 training images (pixel / 255).
CIFAR100_MEAN: tuple[float, float, float] = (0.5071, 0.4865, 0.4409)
CIFAR100_STD: tuple[float, float, float] = (0.2673, 0.2564, 0.2762)

#: Official archive and extracted folder names, per dataset (as torchvision expects them).
CIFAR_FILES: dict[str, tuple[str, str]] = {
    "cifar10": ("cifar-10-python.tar.gz", "cifar-10-batches-py"),
    "cifar100": ("cifar-100-python.tar.gz", "cifar-100-python"),
}
_CIFAR_CLASSES = {"cifar10": 10, "cifar100": 100}


def missing_cifar_message(name: str, data_dir: Path) -> str:
    """Explain where the CIFAR files must go (used in the error raised when they are absent)."""
    archive, folder = CIFAR_FILES[name]
    return (
        f"{name} files not found in data folder '{data_dir}' and could not be downloaded. "
        f"Put the official '{archive}' (https://www.cs.toronto.edu/~kriz/cifar.html) or its "
        f"extracted '{folder}/' folder into '{data_dir}' (run-config key 'data-dir'), or run "
        "once with network access so that it is downloaded there."
    )


#: Files of each split inside the extracted folder (torchvision's layout).
CIFAR_SPLIT_FILES: dict[tuple[str, bool], tuple[str, ...]] = {
    ("cifar10", True): tuple(f"data_batch_{i}" for i in range(1, 6)),
    ("cifar10", False): ("test_batch",),
    ("cifar100", True): ("train",),
    ("cifar100", False): ("test",),
}


#: Largest CIFAR batch file read (bytes). The official files are 31 MB (CIFAR-10, each of six)
#: and 155 MB (CIFAR-100's ``train``); a larger one is not a CIFAR batch.
MAX_CIFAR_FILE_BYTES = 256 * 2**20

#: The only globals a CIFAR batch file refers to: numpy's array and dtype reconstruction
#: (under numpy 1 and 2 module names, pickle protocols 2 to 5) and ``_codecs.encode`` (how
#: protocol 2 stores bytes). Nothing else can be looked up, so nothing else can be called.
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


class CifarUnpickler(pickle.Unpickler):
    """An unpickler that builds only what a CIFAR batch holds (:data:`CIFAR_PICKLE_GLOBALS`).

    Any other global (``os.system``, ``builtins.eval``, a class, ...) is refused before it is
    looked up.
    """

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
    raw = entry.get("labels", entry.get("fine_labels"))
    try:
        labels = np.asarray(raw)
    except (ValueError, TypeError) as err:
        raise ValueError(f"{where}: its labels cannot be read ({first_line(err)})") from err
    classes = _CIFAR_CLASSES[name]
    if labels.dtype.kind not in "iu" or labels.shape != (data.shape[0],):
        raise ValueError(
            f"{where}: its labels are {labels.dtype} {labels.shape}, not {data.shape[0]} integers"
        )
    if labels.size and (labels.min() < 0 or labels.max() >= classes):
        raise ValueError(f"{where}: its labels leave [0, {classes})")
    return data.reshape(-1, 3, 32, 32), labels.astype(np.int64)


def read_cifar_folder(
    name: str, folder: Path, *, train: bool
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Read an extracted CIFAR folder in torchvision's format, safely: uint8 pixels, int64 labels.

    Without the official MD5 checks, so re-packed or generated files in that format load too (the
    round benchmark's). Raises FileNotFoundError naming a missing file, ValueError (one line) for a
    file that is not a CIFAR batch.
    """
    pixels, labels = [], []
    for file in CIFAR_SPLIT_FILES[(name, train)]:
        path = folder / file
        if not path.is_file():
            raise FileNotFoundError(f"{name}: '{path}' is missing from '{folder}'")
        batch_pixels, batch_labels = _cifar_entry(path, name)
        pixels.append(batch_pixels)
        labels.append(batch_labels)
    return np.concatenate(pixels), np.concatenate(labels)


def first_missing_folder(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if ``path`` exists)."""
    missing = None
    for folder in (path, *path.parents):
        if folder.exists():
            break
        missing = folder
    return missing


def load_cifar(name: str, data_dir: str | Path, *, train: bool, download: bool = True) -> ImageSet:
    """Load the CIFAR-10 or CIFAR-100 (fine labels) training or test split as an :class:`ImageSet`.

    An extracted folder in ``data_dir`` is read directly (:func:`read_cifar_folder`); otherwise
    torchvision loads the official archive, downloading it when ``download``. Raises
    FileNotFoundError naming the folder and the files to put there.
    """
    if name not in CIFAR_FILES:
        raise ValueError(f'name must be "cifar10" or "cifar100"; got {name!r}')
    root = Path(data_dir)
    folder = root / CIFAR_FILES[name][1]
    if folder.is_dir():
        pixels, targets = read_cifar_folder(name, folder, train=train)
    else:
        from torchvision import datasets as tv_datasets

        loader = tv_datasets.CIFAR10 if name == "cifar10" else tv_datasets.CIFAR100
        try:
            data = loader(root=str(root), train=train, download=False)
        except RuntimeError as not_found:
            if not download:
                raise FileNotFoundError(missing_cifar_message(name, root)) from not_found
            created = first_missing_folder(root)
            try:
                root.mkdir(parents=True, exist_ok=True)
                data = loader(root=str(root), train=train, download=True)
            except Exception as failed:  # offline, proxy, bad archive: "provide the files"
                if created is not None:  # a failed download leaves no folder behind
                    shutil.rmtree(created, ignore_errors=True)
                raise FileNotFoundError(missing_cifar_message(name, root)) from failed
        pixels = np.asarray(data.data, dtype=np.uint8).transpose(0, 3, 1, 2)
        targets = np.asarray(data.targets, dtype=np.int64)
    pixels = np.ascontiguousarray(pixels)
    mean, std = (CIFAR10_MEAN, CIFAR10_STD) if name == "cifar10" else (CIFAR100_MEAN, CIFAR100_STD)
    return ImageSet(
        pixels=pixels,
        labels=targets,
        num_classes=_CIFAR_CLASSES[name],
        scale=1.0 / 255.0,
        mean=mean,
        std=std,
    )


def _cifar_data(name: str, data_dir: str) -> LoadedData:
    """CIFAR-10 or CIFAR-100 from ``data_dir`` under the data-set contract."""
    train = load_cifar(name, data_dir, train=True)
    test = load_cifar(name, data_dir, train=False)
    return train.arrays(), test.arrays(), train.num_classes


def cifar10_data(data_dir: str) -> LoadedData:
    """The ``cifar10`` data set under the data-set contract: 50,000 + 10,000 images, C = 10."""
    return _cifar_data("cifar10", data_dir)


def cifar100_data(data_dir: str) -> LoadedData:
    """The ``cifar100`` data set under the data-set contract: 50,000 + 10,000 images, C = 100."""
    return _cifar_data("cifar100", data_dir)
