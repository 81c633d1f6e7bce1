"""The containers of a data set's splits: :class:`DataSplit`, :class:`ImageSet` and pixels.

The built-in image sets keep their inputs as :class:`NormalizedPixels`: ``uint8`` pixels plus a
per-channel affine normalisation, converted to ``float32`` only for the samples a computation
needs (the full CIFAR training set is 150 MB as ``uint8`` but 614 MB as ``float32``, and in
simulation every Ray worker process holds one copy). Every checked split, built-in or the
researcher's, is a :class:`DataSplit` (:func:`fedcgd_task.datasets.contract.check_data`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import torch


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
