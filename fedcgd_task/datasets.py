"""Data sets behind one contract: the built-in image and MNIST-1D sets and the researcher's own.

The run-config key ``dataset`` names a *data-set function*: a built-in name, the keys of
:data:`BUILTIN_DATASETS` (``digits``, ``cifar10``, ``cifar100``, ``mnist1d``), or a reference to
the researcher's function, ``package.module:function`` or ``/absolute/path/file.py:function``
(:func:`fedcgd_task.imports.import_object`). Built-in or not, every data-set function follows
the same contract:

* it takes no argument, or keyword arguments among :data:`DATA_KEYWORDS` (its signature says
  which): ``data_dir``, the run config's ``data-dir`` as an absolute path, and ``settings``, the
  run's validated :class:`fedcgd_task.settings.TaskSettings`, for data that depend on other
  run-config keys (the built-in ``mnist1d`` reads ``mnist1d-samples`` from it). A function with
  ``**kwargs`` gets ``data_dir``; ``settings`` only goes to a function that names it;
* it returns ``((x_train, y_train), (x_test, y_test))`` or
  ``((x_train, y_train), (x_test, y_test), num_classes)``;
* ``x_train``, ``x_test``: real-valued arrays of shape [N, *input_shape] with at least one
  input dimension and the same input shape in both sets (anything :func:`numpy.asarray`
  reads; integer and bool values are converted too), stored as float32, every value finite;
* ``y_train``, ``y_test``: integer arrays of shape [N] (an integer dtype; float labels are
  refused) with labels in [0, num_classes);
* ``num_classes``: an int >= 2; without it, C = the largest label of both sets + 1 (>= 2);
* each set holds at least one sample, and x and y the same number N.

:func:`load_data` calls the function once per process and (dataset, data-dir), and settings
for a function that takes them (cached; the result must be a pure function of its arguments),
checks the result (:func:`check_data`: a one-line ValueError naming the key ``dataset``, its
value and what is allowed) and returns two :class:`DataSplit`. Nothing here branches on a
data-set name: the built-ins are entries of :data:`BUILTIN_DATASETS` like any other function.

The built-in image sets return their inputs as :class:`NormalizedPixels`: ``uint8`` pixels
plus a per-channel affine normalisation, converted to ``float32`` only for the samples a
computation needs (the full CIFAR training set is 150 MB as ``uint8`` but 614 MB as
``float32``, and in simulation every Ray worker process holds one copy).

* ``digits``: :func:`sklearn.datasets.load_digits`, 1797 images of 1 x 8 x 8 with integer
  intensities 0..16, scaled to [0, 1] (x = pixel / 16, no further normalisation); a fixed
  stratified 80 / 20 train / test split with split seed :data:`DIGITS_SPLIT_SEED` = 0
  (1437 train, 360 test), independent of the run seed so every run sees the same test set.
* ``cifar10`` / ``cifar100``: :mod:`torchvision.datasets` under the ``data-dir`` folder,
  normalised per channel, x = (pixel / 255 - mean_c) / std_c, with the usual training-set
  statistics :data:`CIFAR10_MEAN` / :data:`CIFAR10_STD` and :data:`CIFAR100_MEAN` /
  :data:`CIFAR100_STD`. The files are looked for first; if absent, one download is attempted;
  if that fails too (offline), a :class:`FileNotFoundError` says where to put them.
* ``mnist1d``: MNIST-1D (Greydanus & Kobak 2024), generated offline by the ``mnist1d``
  package's ``make_dataset`` with its default arguments (``get_dataset_args``: generator seed
  42, ``train_split`` 0.8, ...) except ``num_samples`` = the run config's ``mnist1d-samples``
  (default 20,000: 16,000 training and 4,000 test samples); inputs float32 [N, 1, 40] (one
  channel of 40 points, as Conv1d takes them, standardised by the package to mean 0 and
  standard deviation 1 over the whole set), labels int64 in 0..9. The data do not depend on the
  run seed, and generating them leaves the global random states of ``numpy.random`` and
  ``random`` (which the package seeds and draws from) as they were. The arrays are cached in
  ``data-dir`` as ``mnist1d-<N>-<key>.npz``, the key a hash of every argument of
  ``make_dataset`` and the package version (:func:`mnist1d_cache_path`), written atomically
  with the SHA-256 of its content; a later load with the same arguments reads that file only
  when its arrays' headers declare exactly the expected shapes and dtypes and its content
  hashes to the stored digest, and regenerates it otherwise (:func:`_read_mnist1d_cache`).

The CIFAR batch files (Python pickles) are read with an unpickler that builds numpy arrays,
lists, dicts, strings and numbers only (:class:`CifarUnpickler`): a crafted ``data_batch_*``
cannot run code while it is read.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import inspect
import json
import os
import pickle
import random
import shutil
import tempfile
import threading
import warnings
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt
import torch

from fedcgd_task.imports import builtin_or_function, first_line

if TYPE_CHECKING:
    from fedcgd_task.settings import TaskSettings

#: Seed of the fixed stratified train / test split of the digits set.
DIGITS_SPLIT_SEED = 0
#: Share of the digits set used as test set.
DIGITS_TEST_FRACTION = 0.2
#: Largest intensity in scikit-learn's digits images.
DIGITS_MAX_INTENSITY = 16.0
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

#: The run-config key that names the data-set function.
DATASET_KEY = "dataset"
#: What a data-set function must return (named in the error messages).
RETURN_CONTRACT = (
    "((x_train, y_train), (x_test, y_test)) or ((x_train, y_train), (x_test, y_test), num_classes)"
)


@dataclass(frozen=True, eq=False)
class NormalizedPixels:
    """Images stored as ``uint8`` that read as ``float32``: x = (pixel * scale - mean_c) / std_c.

    The inputs the built-in data-set functions return: a float32 array of shape [N, C, H, W]
    in meaning, whose rows are computed on demand (:meth:`tensor`) from the stored pixels.

    Attributes
    ----------
    pixels : numpy.ndarray of uint8, shape [N, C, H, W]
        Raw intensities, channels first.
    scale : float
        Factor mapping a raw intensity to [0, 1].
    mean, std : tuple of float, length C
        Per-channel normalisation applied after scaling.

    """

    pixels: npt.NDArray[np.uint8]
    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        """[N, C, H, W], the shape of the float32 array these pixels stand for."""
        return tuple(int(s) for s in self.pixels.shape)

    def __len__(self) -> int:
        return int(self.pixels.shape[0])

    def tensor(self, rows: npt.NDArray[np.int64] | None = None) -> torch.Tensor:
        """The normalised images, all or ``rows`` (repeats allowed), as float32 [n, C, H, W]."""
        pixels = self.pixels if rows is None else self.pixels[rows]
        x = torch.from_numpy(np.ascontiguousarray(pixels)).to(torch.float32) * self.scale
        mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        return (x - mean) / std

    def all_finite(self) -> bool:
        """Whether every value is finite: :meth:`tensor` of each of the 256 levels per channel."""
        channels = int(self.pixels.shape[1])
        ramp = np.arange(256, dtype=np.uint8).reshape(1, 1, 256, 1)
        levels = np.tile(ramp, (1, channels, 1, 1))
        levels_only = NormalizedPixels(levels, self.scale, self.mean, self.std)
        return bool(torch.isfinite(levels_only.tensor()).all())


#: The inputs of a :class:`DataSplit`: float32 values, stored as such or as normalised pixels.
Inputs: TypeAlias = npt.NDArray[np.float32] | NormalizedPixels


@dataclass(frozen=True, eq=False)
class ImageSet:
    """Labelled images stored as ``uint8`` with the affine map to normalised ``float32``.

    What the image readers (:func:`load_digits_split`, :func:`load_cifar`) return; the
    built-in data-set functions hand on its :meth:`arrays`.

    Attributes
    ----------
    pixels : numpy.ndarray of uint8, shape [N, C, H, W]
        Raw intensities, channels first.
    labels : numpy.ndarray of int64, shape [N]
        Class ids in ``0 .. num_classes - 1``.
    num_classes : int
        Number of classes C of the dataset (not only those present).
    scale : float
        Factor mapping a raw intensity to [0, 1].
    mean, std : tuple of float, length C_channels
        Per-channel normalisation applied after scaling: x = (pixel * scale - mean) / std.

    """

    pixels: npt.NDArray[np.uint8]
    labels: npt.NDArray[np.int64]
    num_classes: int
    scale: float
    mean: tuple[float, ...]
    std: tuple[float, ...]

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def input_shape(self) -> tuple[int, int, int]:
        """Shape (channels, height, width) of one image."""
        _, c, h, w = self.pixels.shape
        return (int(c), int(h), int(w))

    @property
    def inputs(self) -> NormalizedPixels:
        """The images as :class:`NormalizedPixels` (no copy of the pixels)."""
        return NormalizedPixels(self.pixels, self.scale, self.mean, self.std)

    def arrays(self) -> tuple[NormalizedPixels, npt.NDArray[np.int64]]:
        """``(x, y)`` of the data-set contract: the normalised images and their labels."""
        return self.inputs, self.labels

    def tensors(self, indices: npt.ArrayLike | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return the normalised images [n, C, H, W] and labels [n] (:meth:`DataSplit.tensors`)."""
        return DataSplit(self.inputs, self.labels, self.num_classes).tensors(indices)


@dataclass(frozen=True, eq=False)
class DataSplit:
    """One checked split (training or test) of a data set, as the apps use it.

    Attributes
    ----------
    inputs : numpy.ndarray of float32 or NormalizedPixels, shape [N, *input_shape]
        The inputs (finite).
    labels : numpy.ndarray of int64, shape [N]
        Class ids in ``0 .. num_classes - 1``.
    num_classes : int
        Number of classes C of the data set (not only those present in this split).

    """

    inputs: Inputs
    labels: npt.NDArray[np.int64]
    num_classes: int

    def __len__(self) -> int:
        return int(self.labels.shape[0])

    @property
    def input_shape(self) -> tuple[int, ...]:
        """Shape of one input (``x.shape[1:]``), e.g. (channels, height, width)."""
        return tuple(int(s) for s in self.inputs.shape[1:])

    def tensors(self, indices: npt.ArrayLike | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return inputs and labels as tensors, optionally only for ``indices``.

        Parameters
        ----------
        indices : array_like of int, shape [n], optional
            Rows to take (repeats allowed); all rows when omitted.

        Returns
        -------
        x : torch.Tensor of float32, shape [n, *input_shape]
        y : torch.Tensor of int64, shape [n]

        """
        rows = None if indices is None else np.asarray(indices, dtype=np.int64)
        if isinstance(self.inputs, NormalizedPixels):
            x = self.inputs.tensor(rows)
        else:
            chosen = self.inputs if rows is None else self.inputs[rows]
            x = torch.from_numpy(np.array(chosen, dtype=np.float32))
        labels = self.labels if rows is None else self.labels[rows]
        return x, torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))


def load_digits_split() -> tuple[ImageSet, ImageSet]:
    """Load scikit-learn's digits and split it 80 / 20, stratified, with split seed 0.

    Returns
    -------
    train, test : ImageSet
        1437 and 360 images of shape [1, 8, 8], 10 classes, intensities scaled by 1 / 16.

    """
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    pixels = np.asarray(bunch.images, dtype=np.uint8).reshape(-1, 1, 8, 8)
    labels = np.asarray(bunch.target, dtype=np.int64)
    idx_train, idx_test = train_test_split(
        np.arange(labels.size),
        test_size=DIGITS_TEST_FRACTION,
        random_state=DIGITS_SPLIT_SEED,
        stratify=labels,
    )
    idx_train, idx_test = np.sort(idx_train), np.sort(idx_test)

    def subset(rows: npt.NDArray[np.int64]) -> ImageSet:
        return ImageSet(
            pixels=pixels[rows],
            labels=labels[rows],
            num_classes=10,
            scale=1.0 / DIGITS_MAX_INTENSITY,
            mean=(0.0,),
            std=(1.0,),
        )

    return subset(idx_train), subset(idx_test)


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

    Dicts, lists, strings, bytes and numbers need no global; numpy arrays need the globals
    above. Any other global (``os.system``, ``builtins.eval``, a class's constructor, ...) is
    refused before it is looked up, so a crafted file cannot run code while it is read.
    """

    def find_class(self, module: str, name: str) -> Any:  # noqa: D102 - pickle's hook
        if (module, name) in CIFAR_PICKLE_GLOBALS:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"it refers to {module}.{name}, which a CIFAR batch never holds (refused unread: "
            "only numpy arrays, lists, dicts, strings and numbers are built)"
        )


def _cifar_entry(path: Path, name: str) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Pixels [n, 3, 32, 32] and labels [n] of one CIFAR batch file, checked.

    Raises
    ------
    ValueError
        One line naming the file: too large, refused by :class:`CifarUnpickler`, or not a
        dict with ``data`` (uint8 [n, 3072]) and ``labels`` / ``fine_labels`` (n integers in
        [0, C)).
    """
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
    """Read an extracted CIFAR folder in torchvision's file format (Python pickles), safely.

    The same files and layout torchvision reads (``data``: uint8 rows of 3 × 1024 channel-major
    pixels; ``labels``, or CIFAR-100's ``fine_labels``), without the official MD5 checks, so
    re-packed or generated files in that format load too (e.g. the round benchmark's). Each
    file is at most :data:`MAX_CIFAR_FILE_BYTES` and is read by :class:`CifarUnpickler`, which
    builds numpy arrays, lists, dicts, strings and numbers only: a crafted file cannot run
    code.

    Returns
    -------
    (uint8 [N, 3, 32, 32], int64 [N])
        Pixels and labels.

    Raises
    ------
    FileNotFoundError
        Naming the missing file and the folder.
    ValueError
        One line naming a file that is not a CIFAR batch (:func:`_cifar_entry`).
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
    """Load the CIFAR-10 or CIFAR-100 training or test split.

    An extracted folder in ``data_dir`` is read directly (:func:`read_cifar_folder`);
    otherwise torchvision loads the official archive, downloading it when allowed.

    Parameters
    ----------
    name : str
        ``"cifar10"`` or ``"cifar100"``.
    data_dir : str or pathlib.Path
        Folder holding ``cifar-10-batches-py/`` (resp. ``cifar-100-python/``) or the official
        archive.
    train : bool
        Training split (True) or test split (False).
    download : bool
        Whether to try a download when the files are absent (tests switch it off).

    Returns
    -------
    ImageSet
        Images [N, 3, 32, 32] as uint8 with the dataset's normalisation; CIFAR-100 uses the
        100 fine labels.

    Raises
    ------
    FileNotFoundError
        If the files are absent and cannot be downloaded; the message names the folder and the
        files to put there.

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


#: What a data-set function returns (checked by :func:`check_data`).
LoadedData: TypeAlias = tuple[Any, ...]
#: A data-set function: no argument or :data:`DATA_KEYWORDS`, returning :data:`LoadedData`.
DataFunction: TypeAlias = Callable[..., Any]


def digits_data() -> LoadedData:
    """The ``digits`` data set under the data-set contract (bundled: no data folder).

    Returns
    -------
    ((NormalizedPixels, int64 array), (NormalizedPixels, int64 array), int)
        :func:`load_digits_split`'s 1437 training and 360 test images and C = 10.

    """
    train, test = load_digits_split()
    return train.arrays(), test.arrays(), train.num_classes


def _cifar_data(name: str, data_dir: str) -> LoadedData:
    """CIFAR-10 or CIFAR-100 from ``data_dir`` under the data-set contract."""
    train = load_cifar(name, data_dir, train=True)
    test = load_cifar(name, data_dir, train=False)
    return train.arrays(), test.arrays(), train.num_classes


def cifar10_data(data_dir: str) -> LoadedData:
    """The ``cifar10`` data set under the data-set contract (files in ``data_dir``).

    Returns
    -------
    ((NormalizedPixels, int64 array), (NormalizedPixels, int64 array), int)
        50,000 training and 10,000 test images of 3 x 32 x 32 and C = 10 (:func:`load_cifar`).

    """
    return _cifar_data("cifar10", data_dir)


def cifar100_data(data_dir: str) -> LoadedData:
    """The ``cifar100`` data set under the data-set contract (files in ``data_dir``).

    Returns
    -------
    ((NormalizedPixels, int64 array), (NormalizedPixels, int64 array), int)
        50,000 training and 10,000 test images of 3 x 32 x 32 and C = 100 (fine labels).

    """
    return _cifar_data("cifar100", data_dir)


#: Number of classes of MNIST-1D (the digits 0..9).
MNIST1D_NUM_CLASSES = 10
#: Version of the cache file's layout (part of the cache key: a new layout never reads an old
#: file). 2: the file holds the SHA-256 of its content (:func:`mnist1d_content_digest`).
MNIST1D_CACHE_FORMAT = 2
#: ``get_dataset_args`` entries that ``make_dataset`` does not read (the download address of
#: the package's pre-built file), left out of the arguments and the cache key.
MNIST1D_UNUSED_ARGS: tuple[str, ...] = ("url",)
#: One generation at a time per process: the package draws from the global numpy generator,
#: whose state is saved before and restored after each generation.
_GLOBAL_RNG_LOCK = threading.Lock()

#: The four arrays of a generated MNIST-1D: x_train, y_train, x_test, y_test.
Mnist1dArrays: TypeAlias = tuple[
    npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]
]


def mnist1d_arguments(num_samples: int) -> dict[str, Any]:
    """The arguments ``make_dataset`` gets: the package defaults with ``num_samples``.

    Parameters
    ----------
    num_samples : int
        Total samples N (training and test); the package makes N // 10 of each digit.

    Returns
    -------
    dict
        ``mnist1d.data.get_dataset_args(as_dict=True)`` without :data:`MNIST1D_UNUSED_ARGS`,
        ``num_samples`` replaced (JSON-serialisable: the cache key is built from it).

    """
    from mnist1d.data import get_dataset_args

    arguments = {
        key: value
        for key, value in get_dataset_args(as_dict=True).items()
        if key not in MNIST1D_UNUSED_ARGS
    }
    arguments["num_samples"] = int(num_samples)
    return arguments


def mnist1d_cache_key(arguments: dict[str, Any]) -> str:
    """Canonical JSON of everything the generated arrays depend on (the cache key's source).

    The ``make_dataset`` arguments, the installed ``mnist1d`` version and
    :data:`MNIST1D_CACHE_FORMAT`, with sorted keys and no spaces: equal arguments give the same
    text, any other argument another text.
    """
    key = {
        "format": MNIST1D_CACHE_FORMAT,
        "make_dataset": arguments,
        "mnist1d": importlib.metadata.version("mnist1d"),
    }
    return json.dumps(key, sort_keys=True, separators=(",", ":"))


def mnist1d_cache_path(data_dir: str | Path, arguments: dict[str, Any]) -> Path:
    """``<data_dir>/mnist1d-<N>-<16 hex digits of sha256(mnist1d_cache_key(arguments))>.npz``."""
    digest = hashlib.sha256(mnist1d_cache_key(arguments).encode()).hexdigest()[:16]
    return Path(data_dir) / f"mnist1d-{arguments['num_samples']}-{digest}.npz"


@contextlib.contextmanager
def global_random_state_kept() -> Iterator[None]:
    """Run a block that seeds or draws from ``numpy.random``'s and ``random``'s global state.

    Both states are saved on entry and restored on exit (also after an exception), under a
    process-wide lock, so code outside the block sees the global generators unchanged. Threads
    that draw from the global generators at the same time are not protected.
    """
    with _GLOBAL_RNG_LOCK:
        numpy_state = np.random.get_state()  # noqa: NPY002 (the legacy global state itself)
        python_state = random.getstate()
        try:
            yield
        finally:
            np.random.set_state(numpy_state)  # noqa: NPY002
            random.setstate(python_state)


def generate_mnist1d(arguments: dict[str, Any]) -> Mnist1dArrays:
    """Generate MNIST-1D with ``mnist1d.data.make_dataset(arguments)`` (deterministic).

    The package seeds and draws from the global numpy (and ``random``) generators; that runs
    inside :func:`global_random_state_kept`.

    Parameters
    ----------
    arguments : dict
        :func:`mnist1d_arguments`.

    Returns
    -------
    x_train, y_train, x_test, y_test
        Inputs float32 [n, 1, final_seq_length] (channels first), labels int64 [n]; the
        package's split: the first ``int(N * train_split)`` shuffled samples train.

    """
    from mnist1d.data import make_dataset
    from mnist1d.utils import ObjectView

    with global_random_state_kept():
        data = make_dataset(ObjectView(dict(arguments)))

    def inputs(x: npt.ArrayLike) -> npt.NDArray[np.float32]:
        array = np.asarray(x, dtype=np.float32)
        return np.ascontiguousarray(array.reshape(array.shape[0], 1, -1))

    def labels(y: npt.ArrayLike) -> npt.NDArray[np.int64]:
        return np.ascontiguousarray(np.asarray(y, dtype=np.int64))

    return inputs(data["x"]), labels(data["y"]), inputs(data["x_test"]), labels(data["y_test"])


#: Names of the arrays in a cache file, in :data:`Mnist1dArrays` order.
_MNIST1D_ARRAYS = ("x_train", "y_train", "x_test", "y_test")


def mnist1d_content_digest(key: str, arrays: Mnist1dArrays) -> str:
    """SHA-256 (hex) of a cache's content: its key, and each array's dtype, shape and bytes."""
    digest = hashlib.sha256(key.encode())
    for name, array in zip(_MNIST1D_ARRAYS, arrays, strict=True):
        contiguous = np.ascontiguousarray(array)
        digest.update(f"|{name}|{contiguous.dtype.str}|{contiguous.shape}|".encode())
        digest.update(contiguous.tobytes())
    return digest.hexdigest()


def mnist1d_shapes(arguments: dict[str, Any]) -> dict[str, tuple[tuple[int, ...], str]]:
    """Shape and dtype of each array :func:`generate_mnist1d` returns for ``arguments``.

    The package splits the N = ``num_samples`` samples at ``int(N * train_split)``; inputs
    have ``final_seq_length`` points in one channel.
    """
    total = int(arguments["num_samples"])
    train = int(total * float(arguments["train_split"]))
    length = int(arguments["final_seq_length"])
    return {
        "x_train": ((train, 1, length), np.dtype(np.float32).str),
        "y_train": ((train,), np.dtype(np.int64).str),
        "x_test": ((total - train, 1, length), np.dtype(np.float32).str),
        "y_test": ((total - train,), np.dtype(np.int64).str),
    }


def _read_mnist1d_cache(
    path: Path, key: str, arguments: dict[str, Any] | None = None
) -> Mnist1dArrays | None:
    """The arrays of cache file ``path`` if it exists, reads, and is what ``key`` generates.

    Checked before any data is read: the arrays' headers must declare exactly the names,
    shapes and dtypes :func:`mnist1d_shapes` gives (a file cannot make this read allocate
    more than the real arrays); after reading, the stored key and the SHA-256 of the content
    (:func:`mnist1d_content_digest`) must match. Anything else (another generator's file, an
    edited label, a truncated file) returns None: the caller regenerates and overwrites it.
    """
    from channel.npz import npz_headers

    if path.is_symlink() or not path.is_file():
        return None
    try:
        headers = npz_headers(path)
        if arguments is not None:
            wanted = mnist1d_shapes(arguments)
            declared = {n: (h.shape, h.dtype.str) for n, h in headers.items() if n in wanted}
            if set(headers) != {*wanted, "key", "content"} or declared != wanted:
                return None
            if any(headers[n].nbytes > 64 * 2**10 for n in ("key", "content")):
                return None
        with np.load(path, allow_pickle=False) as data:
            if str(data["key"]) != key:  # a hash collision or a foreign file: regenerate
                return None
            stored = str(data["content"])
            arrays: Mnist1dArrays = (
                np.asarray(data["x_train"], dtype=np.float32),
                np.asarray(data["y_train"], dtype=np.int64),
                np.asarray(data["x_test"], dtype=np.float32),
                np.asarray(data["y_test"], dtype=np.int64),
            )
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # unreadable (e.g. truncated by hand): regenerate and overwrite
    if stored != mnist1d_content_digest(key, arrays):
        return None  # edited after it was written (labels shifted, ...): regenerate
    return arrays


def _write_mnist1d_cache(path: Path, key: str, arrays: Mnist1dArrays) -> None:
    """Write ``arrays`` and ``key`` to ``path`` atomically (temporary file, then os.replace).

    Processes that generate the same data at once each write a whole file and the last rename
    wins; readers see either no file or a complete one. A folder that cannot be written only
    costs the cache (a warning): the data were generated anyway.
    """
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as fh:
            x_train, y_train, x_test, y_test = arrays
            np.savez(
                fh,
                key=np.array(key),
                content=np.array(mnist1d_content_digest(key, arrays)),
                x_train=x_train,
                y_train=y_train,
                x_test=x_test,
                y_test=y_test,
            )
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide the cache from other users
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        warnings.warn(
            f"mnist1d: could not cache the generated arrays in {path.parent} ({err}); they are "
            "generated again by every process",
            RuntimeWarning,
            stacklevel=3,
        )
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def load_mnist1d(data_dir: str | Path, num_samples: int) -> Mnist1dArrays:
    """MNIST-1D with ``num_samples`` samples: from the cache in ``data_dir``, or generated.

    Parameters
    ----------
    data_dir : str or pathlib.Path
        Folder of the cache file (:func:`mnist1d_cache_path`); created when absent.
    num_samples : int
        Total samples N (:func:`mnist1d_arguments`).

    Returns
    -------
    x_train, y_train, x_test, y_test
        :func:`generate_mnist1d`'s arrays (read back bit for bit from the cache).

    """
    arguments = mnist1d_arguments(num_samples)
    key = mnist1d_cache_key(arguments)
    path = mnist1d_cache_path(data_dir, arguments)
    cached = _read_mnist1d_cache(path, key, arguments)
    if cached is not None:
        return cached
    arrays = generate_mnist1d(arguments)
    _write_mnist1d_cache(path, key, arrays)
    return arrays


def mnist1d_data(*, data_dir: str, settings: TaskSettings) -> LoadedData:
    """The ``mnist1d`` data set under the data-set contract (generated; cached in ``data_dir``).

    Parameters
    ----------
    data_dir : str
        The run's data folder: where the generated arrays are cached.
    settings : TaskSettings
        The run's settings; ``settings.mnist1d_samples`` is the sample count N.

    Returns
    -------
    ((float32 array, int64 array), (float32 array, int64 array), int)
        0.8 N training and 0.2 N test inputs [n, 1, 40] with their labels, and C = 10
        (:func:`load_mnist1d`).

    """
    x_train, y_train, x_test, y_test = load_mnist1d(data_dir, settings.mnist1d_samples)
    return (x_train, y_train), (x_test, y_test), MNIST1D_NUM_CLASSES


#: The built-in data sets: run-config name -> data-set function (the contract above).
BUILTIN_DATASETS: dict[str, DataFunction] = {
    "digits": digits_data,
    "cifar10": cifar10_data,
    "cifar100": cifar100_data,
    "mnist1d": mnist1d_data,
}
#: Keyword arguments a data-set function may take (its signature says which).
DATA_KEYWORDS: tuple[str, ...] = ("data_dir", "settings")


def _where(name: str) -> str:
    return f"run-config key '{DATASET_KEY}' = {name!r}"


def dataset_function(name: str) -> DataFunction:
    """Return the data-set function ``name`` names: a built-in, or the researcher's reference.

    An unknown name, or a reference that cannot be imported or is not callable, raises a
    one-line ValueError (:func:`fedcgd_task.imports.builtin_or_function`).
    """
    contract = (
        "a function of no argument or of data_dir and / or settings keywords that returns "
        f"{RETURN_CONTRACT}"
    )
    return builtin_or_function(name, DATASET_KEY, BUILTIN_DATASETS, "data set", contract)


def data_keywords(function: DataFunction, name: str) -> frozenset[str]:
    """The :data:`DATA_KEYWORDS` ``function`` takes; refuse one that needs other arguments.

    A parameter named ``data_dir`` or ``settings`` (positional-or-keyword or keyword-only)
    takes that keyword; ``**kwargs`` takes ``data_dir``. A function without a readable
    signature (a C function) is called bare.

    Raises
    ------
    ValueError
        One line naming the key ``dataset``: the function needs other arguments.

    """
    try:
        params = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # no signature to read (a C function): call it bare
        return frozenset()
    named = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    takes = {p.name for p in params if p.name in DATA_KEYWORDS and p.kind in named}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        takes.add("data_dir")
    required = [
        p.name
        for p in params
        if p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_ONLY, *named)
        and not (p.name in DATA_KEYWORDS and p.kind in named)
    ]
    if required:
        raise ValueError(
            f"{_where(name)}: the function needs the argument(s) {', '.join(required)}; a "
            "data-set function takes no argument, or data_dir and / or settings keywords"
        )
    return frozenset(takes)


def default_task_settings(name: str, data_dir: str) -> TaskSettings:
    """The project's default settings (pyproject.toml) with data set ``name`` in ``data_dir``.

    What a data-set function that takes ``settings`` gets when it is loaded outside a run
    (:func:`load_data` without settings).
    """
    from fedcgd_task.settings import TaskSettings, default_run_config

    config = {**default_run_config(), DATASET_KEY: name, "data-dir": data_dir}
    return TaskSettings.from_run_config(config)


def call_dataset_function(
    function: DataFunction, name: str, data_dir: str, settings: TaskSettings | None = None
) -> object:
    """Call a data-set function with the keywords of :data:`DATA_KEYWORDS` its signature takes.

    Parameters
    ----------
    function : callable
        The data-set function.
    name : str
        The run-config value ``dataset`` (named in the messages).
    data_dir : str
        The absolute data folder, for ``data_dir``.
    settings : TaskSettings, optional
        For ``settings``; default: :func:`default_task_settings`.

    Raises
    ------
    FileNotFoundError
        When the function raised one (missing data files), its first line after the key.
    ValueError
        One line naming the key ``dataset``: the function needs other arguments, or it raised.

    """
    takes = data_keywords(function, name)
    kwargs: dict[str, Any] = {}
    if "data_dir" in takes:
        kwargs["data_dir"] = data_dir
    if "settings" in takes:
        kwargs["settings"] = default_task_settings(name, data_dir) if settings is None else settings
    try:
        return function(**kwargs)
    except FileNotFoundError as err:
        raise FileNotFoundError(f"{_where(name)}: {first_line(err)}") from err
    except Exception as err:  # the researcher's code: any failure becomes one line
        raise ValueError(
            f"{_where(name)}: the function raised {type(err).__name__}: {first_line(err)}"
        ) from err


def _structure(value: object, depth: int = 2) -> str:
    """A short picture of a returned value: ``(ndarray, ndarray)``, ``int``."""
    if isinstance(value, tuple | list) and depth > 0:
        inner = ", ".join(_structure(v, depth - 1) for v in value[:4])
        inner += ", ..." if len(value) > 4 else ""
        return f"({inner})" if isinstance(value, tuple) else f"[{inner}]"
    return type(value).__name__


def _check_inputs(x: object, label: str, where: str) -> Inputs:
    """``x`` as float32 [N, *input_shape] (or the given NormalizedPixels), finite."""
    if isinstance(x, NormalizedPixels):
        if not x.all_finite():
            raise ValueError(f"{where}: {label} normalises pixels to values that are not finite")
        if len(x.shape) < 2:
            raise ValueError(f"{where}: {label} has shape {x.shape}; inputs need [N, *input_shape]")
        return x
    try:
        array = np.asarray(x)
    except Exception as err:  # ragged lists, tensors that need grad, ...
        raise ValueError(
            f"{where}: {label} cannot be read as a numeric array ({first_line(err)}); inputs "
            "must be real-valued arrays of shape [N, *input_shape]"
        ) from err
    if array.dtype.kind not in "biuf":
        raise ValueError(
            f"{where}: {label} has dtype {array.dtype}; inputs must be real numbers (float, or "
            "int / bool, converted to float32)"
        )
    if array.ndim < 2:
        raise ValueError(
            f"{where}: {label} has shape {array.shape}; inputs must have shape "
            "[N, *input_shape] with at least one input dimension (e.g. [N, 1] for one feature)"
        )
    with np.errstate(over="ignore"):
        values = array.astype(np.float32, copy=False)
    if not np.isfinite(values).all():
        raise ValueError(
            f"{where}: {label} holds values that are not finite in float32 (nan, inf, or "
            "beyond ±3.4e38); inputs must be finite"
        )
    return values


def _check_labels(y: object, label: str, where: str) -> npt.NDArray[Any]:
    """``y`` as an integer array of shape [N] (not yet range-checked)."""
    try:
        array = np.asarray(y)
    except Exception as err:
        raise ValueError(
            f"{where}: {label} cannot be read as an array ({first_line(err)}); labels must be "
            "integer arrays of shape [N]"
        ) from err
    if array.dtype.kind not in "iu":
        raise ValueError(
            f"{where}: {label} has dtype {array.dtype}; labels must have an integer dtype "
            "(e.g. int64) with values in [0, num_classes)"
        )
    if array.ndim != 1:
        raise ValueError(f"{where}: {label} has shape {array.shape}; labels must have shape [N]")
    return array


def _check_num_classes(value: object, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or int(value) < 2:
        raise ValueError(
            f"{where}: the function returned num_classes = {value!r}; it must be an int >= 2"
        )
    return int(value)


def check_data(result: object, name: str) -> tuple[DataSplit, DataSplit]:
    """Check what a data-set function returned and turn it into the training and test split.

    Parameters
    ----------
    result : object
        The function's return value (the contract in the module docstring).
    name : str
        The run-config value ``dataset`` (named in the messages).

    Returns
    -------
    train, test : DataSplit
        Inputs as float32 (or the given :class:`NormalizedPixels`), labels as int64, and
        the number of classes C (given, or the largest label + 1).

    Raises
    ------
    ValueError
        One line naming the key ``dataset``, its value, what is wrong and what is allowed.

    """
    where = _where(name)
    well_formed = (
        isinstance(result, tuple | list)
        and len(result) in (2, 3)
        and all(isinstance(part, tuple | list) and len(part) == 2 for part in result[:2])
    )
    if not well_formed:
        raise ValueError(
            f"{where}: the function returned {_structure(result)}; it must return {RETURN_CONTRACT}"
        )
    assert isinstance(result, tuple | list)
    given = _check_num_classes(result[2], where) if len(result) == 3 else None
    inputs: dict[str, Inputs] = {}
    labels: dict[str, npt.NDArray[Any]] = {}
    for part, split in zip(result[:2], ("train", "test"), strict=True):
        x = _check_inputs(part[0], f"x_{split}", where)
        y = _check_labels(part[1], f"y_{split}", where)
        if len(x) != len(y):
            raise ValueError(
                f"{where}: x_{split} holds {len(x)} samples but y_{split} {len(y)}; x and y "
                "must hold the same number N"
            )
        if len(y) == 0:
            raise ValueError(
                f"{where}: the {split} set holds no sample; each set needs at least one"
            )
        inputs[split], labels[split] = x, y
    shape_train, shape_test = inputs["train"].shape[1:], inputs["test"].shape[1:]
    if tuple(shape_train) != tuple(shape_test):
        raise ValueError(
            f"{where}: x_train holds inputs of shape {tuple(shape_train)} but x_test of "
            f"{tuple(shape_test)}; both sets must have the same input shape"
        )
    lowest = min(int(labels[s].min()) for s in labels)
    highest = max(int(labels[s].max()) for s in labels)
    num_classes = given if given is not None else highest + 1
    for split, y in labels.items():
        low, high = int(y.min()), int(y.max())
        bad = low if low < 0 else high
        if low < 0 or high >= num_classes:
            source = "num_classes" if given is not None else "the largest label + 1"
            raise ValueError(
                f"{where}: y_{split} holds label {bad}, outside [0, {num_classes}) "
                f"({source} = {num_classes}); labels must be in [0, num_classes)"
            )
    if num_classes < 2:
        raise ValueError(
            f"{where}: the labels hold one class only (labels {lowest} to {highest}); a "
            "classification task needs num_classes >= 2"
        )
    train, test = (
        DataSplit(inputs[s], labels[s].astype(np.int64), num_classes) for s in ("train", "test")
    )
    return train, test


def load_data(
    name: str, data_dir: str, settings: TaskSettings | None = None
) -> tuple[DataSplit, DataSplit]:
    """Load, check and cache the training and test split of a data set, once per process.

    The cache is safe because the result is a pure function of the arguments the function
    takes (the files do not change during a run); per-node mutable state belongs in
    ``context.state`` instead. It is keyed by (name, data_dir), and by the settings only for a
    function that takes them.

    Parameters
    ----------
    name : str
        The run-config value ``dataset``: a key of :data:`BUILTIN_DATASETS` or a reference to
        a data-set function.
    data_dir : str
        The absolute data folder (passed to functions that take ``data_dir``).
    settings : TaskSettings, optional
        The run's settings (passed to functions that take ``settings``); default:
        :func:`default_task_settings`.

    Returns
    -------
    train, test : DataSplit

    Raises
    ------
    ValueError, FileNotFoundError
        One line naming the key ``dataset`` (:func:`dataset_function`,
        :func:`call_dataset_function`, :func:`check_data`).

    """
    takes = data_keywords(dataset_function(name), name)
    if "settings" not in takes:
        return _load_checked(name, data_dir, None)
    if settings is None:
        settings = default_task_settings(name, data_dir)
    return _load_checked(name, data_dir, settings)


@functools.lru_cache(maxsize=2)
def _load_checked(
    name: str, data_dir: str, settings: TaskSettings | None
) -> tuple[DataSplit, DataSplit]:
    """:func:`load_data`'s cached part: call the function and check its result."""
    function = dataset_function(name)
    return check_data(call_dataset_function(function, name, data_dir, settings), name)


def load_dataset(
    name: str, data_dir: str, *, train: bool, settings: TaskSettings | None = None
) -> DataSplit:
    """The training (``train``) or test split of data set ``name`` (:func:`load_data`, cached)."""
    train_set, test_set = load_data(name, data_dir, settings)
    return train_set if train else test_set


def load_train_set(settings: TaskSettings) -> DataSplit:
    """Return the full training split of ``settings.dataset`` (cached per process)."""
    return load_dataset(settings.dataset, settings.data_dir, train=True, settings=settings)


def load_test_set(settings: TaskSettings) -> DataSplit:
    """Return the test split of ``settings.dataset`` (cached), for central evaluation."""
    return load_dataset(settings.dataset, settings.data_dir, train=False, settings=settings)
