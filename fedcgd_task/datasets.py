"""The image datasets: scikit-learn's digits (offline default), CIFAR-10 and CIFAR-100.

Images are kept as ``uint8`` pixels plus a per-channel affine normalisation and converted to
``float32`` only for the samples a computation needs (:meth:`ImageSet.tensors`): the full
CIFAR training set is 150 MB as ``uint8`` but 614 MB as ``float32``, and in simulation every
Ray worker process holds one copy.

* ``digits``: :func:`sklearn.datasets.load_digits`, 1797 images of 1 x 8 x 8 with integer
  intensities 0..16, scaled to [0, 1] (x = pixel / 16, no further normalisation); a fixed
  stratified 80 / 20 train / test split with split seed :data:`DIGITS_SPLIT_SEED` = 0
  (1437 train, 360 test), independent of the run seed so every run sees the same test set.
* ``cifar10`` / ``cifar100``: :mod:`torchvision.datasets` under the ``data-dir`` folder,
  normalised per channel, x = (pixel / 255 - mean_c) / std_c, with the usual training-set
  statistics :data:`CIFAR10_MEAN` / :data:`CIFAR10_STD` and :data:`CIFAR100_MEAN` /
  :data:`CIFAR100_STD`. The files are looked for first; if absent, one download is attempted;
  if that fails too (offline), a :class:`FileNotFoundError` says where to put them.
"""

from __future__ import annotations

import functools
import pickle
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import torch

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


@dataclass(frozen=True, eq=False)
class ImageSet:
    """Labelled images stored as ``uint8`` with the affine map to normalised ``float32``.

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

    def tensors(self, indices: npt.ArrayLike | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Return normalised images and labels, optionally only for ``indices``.

        Parameters
        ----------
        indices : array_like of int, shape [n], optional
            Rows to take (repeats allowed); all rows when omitted.

        Returns
        -------
        x : torch.Tensor of float32, shape [n, C, H, W]
            x = (pixel * scale - mean_c) / std_c.
        y : torch.Tensor of int64, shape [n]
            Class ids.

        """
        if indices is None:
            pixels, labels = self.pixels, self.labels
        else:
            rows = np.asarray(indices, dtype=np.int64)
            pixels, labels = self.pixels[rows], self.labels[rows]
        x = torch.from_numpy(np.ascontiguousarray(pixels)).to(torch.float32) * self.scale
        mean = torch.tensor(self.mean, dtype=torch.float32).view(1, -1, 1, 1)
        std = torch.tensor(self.std, dtype=torch.float32).view(1, -1, 1, 1)
        x = (x - mean) / std
        y = torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))
        return x, y


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


def read_cifar_folder(
    name: str, folder: Path, *, train: bool
) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """Read an extracted CIFAR folder in torchvision's file format (Python pickles).

    The same files and layout torchvision reads (``data``: uint8 rows of 3 × 1024 channel-major
    pixels; ``labels``, or CIFAR-100's ``fine_labels``), without the official MD5 checks, so
    re-packed or generated files in that format load too (e.g. the round benchmark's).

    Returns
    -------
    (uint8 [N, 3, 32, 32], int64 [N])
        Pixels and labels.

    Raises
    ------
    FileNotFoundError
        Naming the missing file and the folder.
    """
    pixels, labels = [], []
    for file in CIFAR_SPLIT_FILES[(name, train)]:
        path = folder / file
        if not path.is_file():
            raise FileNotFoundError(f"{name}: '{path}' is missing from '{folder}'")
        with path.open("rb") as fh:
            entry = pickle.load(fh, encoding="latin1")
        pixels.append(np.asarray(entry["data"], dtype=np.uint8).reshape(-1, 3, 32, 32))
        labels.append(np.asarray(entry.get("labels", entry.get("fine_labels")), dtype=np.int64))
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


@functools.lru_cache(maxsize=4)
def load_dataset(name: str, data_dir: str, *, train: bool, download: bool = True) -> ImageSet:
    """Load one split of a dataset, once per process (cached).

    The cache is safe because the result is a pure function of the arguments (the files do not
    change during a run); per-node mutable state belongs in ``context.state`` instead.

    Parameters
    ----------
    name : str
        ``"digits"``, ``"cifar10"`` or ``"cifar100"``.
    data_dir : str
        Data folder (ignored for digits, which ships with scikit-learn).
    train : bool
        Training (True) or test (False) split.
    download : bool
        Whether a CIFAR download may be attempted when the files are absent.

    Returns
    -------
    ImageSet
        The requested split.

    """
    if name == "digits":
        train_set, test_set = load_digits_split()
        return train_set if train else test_set
    if name in CIFAR_FILES:
        return load_cifar(name, data_dir, train=train, download=download)
    raise ValueError(f'dataset must be one of "digits", "cifar10", "cifar100"; got {name!r}')


def load_train_set(settings: TaskSettings) -> ImageSet:
    """Return the full training split of ``settings.dataset`` (cached per process)."""
    return load_dataset(settings.dataset, settings.data_dir, train=True)


def load_test_set(settings: TaskSettings) -> ImageSet:
    """Return the test split of ``settings.dataset`` (cached), for central evaluation."""
    return load_dataset(settings.dataset, settings.data_dir, train=False)
