"""The containers of a data set's splits: :class:`DataSplit`, :class:`ImageSet` and pixels.

Built-in image sets keep ``uint8`` pixels and convert to ``float32`` only the samples a
computation needs (CIFAR's training set: 150 MB instead of 614 MB, in every Ray worker).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

import numpy as np
import numpy.typing as npt
import torch


@dataclass(frozen=True, eq=False)
class NormalizedPixels:
    """Images stored as ``uint8`` [N, C, H, W] that read as ``float32`` (:meth:`tensor`).

    x = (pixel * scale - mean_c) / std_c, ``scale`` mapping a raw intensity to [0, 1].
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
    """Labelled ``uint8`` images [N, C, H, W] with the ``float32`` map of :class:`NormalizedPixels`.

    ``labels`` int64 [N] in ``0 .. num_classes - 1``; ``num_classes`` counts the data set's
    classes, not only those present.
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
    """One checked split of a data set: finite ``inputs`` [N, *input_shape], int64 ``labels`` [N].

    ``num_classes`` counts the data set's classes, not only those present in this split.
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
        """Inputs (float32) and labels (int64) as tensors, of ``indices`` (may repeat) or all."""
        rows = None if indices is None else np.asarray(indices, dtype=np.int64)
        if isinstance(self.inputs, NormalizedPixels):
            x = self.inputs.tensor(rows)
        else:
            chosen = self.inputs if rows is None else self.inputs[rows]
            x = torch.from_numpy(np.array(chosen, dtype=np.float32))
        labels = self.labels if rows is None else self.labels[rows]
        return x, torch.from_numpy(np.ascontiguousarray(labels, dtype=np.int64))
