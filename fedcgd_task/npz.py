"""``.npz`` headers read before any data: ``numpy.load`` allocates each array at its declared
shape, so callers check names, dtypes, shapes and size first (files on disk are untrusted).
"""  # noqa: D205

from __future__ import annotations

import math
import os
import zipfile
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ArrayHeader:
    """An ``.npy`` header's ``shape`` and ``dtype``."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        """Bytes of the array once read."""
        return math.prod(self.shape) * int(self.dtype.itemsize)


def npz_headers(path: str | os.PathLike[str]) -> dict[str, ArrayHeader]:
    """Each array's header by name, from the zip directory and the members' first bytes;
    ValueError (one line): not an ``.npz`` of ``.npy`` arrays, object dtype, bad header."""  # noqa: D205, D209
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic == b"\x93NUMPY":
        raise ValueError("is a single .npy array, not an .npz archive")
    if not magic.startswith(b"PK\x03\x04"):  # never let np.load fall back to other formats
        raise ValueError("is not an .npz archive (no zip header)")
    headers: dict[str, ArrayHeader] = {}
    try:
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                name = info.filename.removesuffix(".npy")
                if name == info.filename:
                    raise ValueError(f"holds {name!r}, which is not an .npy array")
                with archive.open(info) as member:
                    version = np.lib.format.read_magic(member)
                    if version == (1, 0):
                        shape, _, dtype = np.lib.format.read_array_header_1_0(member)
                    elif version == (2, 0):
                        shape, _, dtype = np.lib.format.read_array_header_2_0(member)
                    else:
                        raise ValueError(f"array {name!r} has .npy format {version}")
                if dtype.hasobject:
                    raise ValueError(f"array {name!r} holds Python objects (pickled data)")
                headers[name] = ArrayHeader(tuple(int(s) for s in shape), dtype)
    except (zipfile.BadZipFile, EOFError) as err:
        raise ValueError(f"is not a readable .npz archive ({err})") from err
    return headers
