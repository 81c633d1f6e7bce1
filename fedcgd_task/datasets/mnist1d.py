"""The built-in ``mnist1d`` data set, generated offline and cached in the data folder.

The ``mnist1d`` package's ``make_dataset`` (Greydanus & Kobak 2024) with its defaults except
``num_samples``; independent of the run seed. The cache's checks: docs/design.md, "Safe loading".
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import os
import threading
import warnings
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from fedcgd_config.settings import TaskSettings

#: Version of the cache file's layout (in the cache key); 3: the file holds its content's SHA-256.
MNIST1D_CACHE_FORMAT = 3
#: Names of the arrays in a cache file, in :data:`Mnist1dArrays` order.
_ARRAYS = ("x_train", "y_train", "x_test", "y_test")

#: The four arrays of a generated MNIST-1D: x_train, y_train, x_test, y_test.
Mnist1dArrays: TypeAlias = tuple[
    npt.NDArray[np.float32], npt.NDArray[np.int64], npt.NDArray[np.float32], npt.NDArray[np.int64]
]


def mnist1d_arguments(num_samples: int) -> dict[str, Any]:
    """``make_dataset``'s arguments (without the unread ``url``) for ``num_samples``."""
    from mnist1d.data import get_dataset_args

    arguments = {k: v for k, v in get_dataset_args(as_dict=True).items() if k != "url"}
    return {**arguments, "num_samples": int(num_samples)}


def mnist1d_cache_key(arguments: dict[str, Any]) -> str:
    """Canonical JSON of the ``make_dataset`` arguments, the package version and cache format."""
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


_GENERATING = threading.Lock()


def generate_mnist1d(arguments: dict[str, Any]) -> Mnist1dArrays:
    """MNIST-1D from ``make_dataset(arguments)``: inputs float32 [n, 1, L], labels int64 [n]."""
    from mnist1d.data import make_dataset
    from mnist1d.utils import ObjectView

    from fedcgd_task.training import seeded_generators

    # The package seeds the global generators (restored after); one generation at a time.
    with _GENERATING, seeded_generators(0):
        data = make_dataset(ObjectView(dict(arguments)))
    x_train, x_test = (np.asarray(data[k], dtype=np.float32) for k in ("x", "x_test"))
    return (
        np.ascontiguousarray(x_train.reshape(len(x_train), 1, -1)),
        np.ascontiguousarray(data["y"], dtype=np.int64),
        np.ascontiguousarray(x_test.reshape(len(x_test), 1, -1)),
        np.ascontiguousarray(data["y_test"], dtype=np.int64),
    )


def mnist1d_content_digest(key: str, arrays: Mnist1dArrays) -> str:
    """SHA-256 (hex) of a cache's content: its key, and each array's dtype, shape and bytes."""
    digest = hashlib.sha256(key.encode())
    for name, array in zip(_ARRAYS, arrays, strict=True):
        contiguous = np.ascontiguousarray(array)
        digest.update(f"|{name}|{contiguous.dtype.str}|{contiguous.shape}|".encode())
        digest.update(contiguous.tobytes())
    return digest.hexdigest()


def _read_cache(path: Path, key: str, arguments: dict[str, Any]) -> Mnist1dArrays | None:
    """The arrays of cache file ``path`` if its headers declare the expected arrays and its stored
    digest matches ``key`` and the arrays read; else None."""  # noqa: D205, D209
    from fedcgd_task.npz import npz_headers

    total, length = int(arguments["num_samples"]), int(arguments["final_seq_length"])
    train = int(total * float(arguments["train_split"]))
    f32, i64 = np.dtype(np.float32).str, np.dtype(np.int64).str
    wanted = {
        "x_train": ((train, 1, length), f32),
        "y_train": ((train,), i64),
        "x_test": ((total - train, 1, length), f32),
        "y_test": ((total - train,), i64),
    }
    if path.is_symlink() or not path.is_file():
        return None
    try:
        headers = npz_headers(path)
        declared = {n: (h.shape, h.dtype.str) for n, h in headers.items() if n in wanted}
        if set(headers) != {*wanted, "content"} or declared != wanted:
            return None
        if headers["content"].nbytes > 64 * 2**10:
            return None
        with np.load(path, allow_pickle=False) as data:
            stored = str(data["content"])
            arrays: Mnist1dArrays = tuple(data[name] for name in _ARRAYS)
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None  # unreadable (e.g. truncated by hand): regenerate and overwrite
    if stored != mnist1d_content_digest(key, arrays):
        return None  # another key, or edited after it was written (labels shifted, ...)
    return arrays


def _write_cache(path: Path, key: str, arrays: Mnist1dArrays) -> None:
    """Write ``arrays`` and their digest with ``key`` to ``path`` atomically (else a warning)."""
    named: dict[str, Any] = dict(zip(_ARRAYS, arrays, strict=True))
    content = mnist1d_content_digest(key, arrays)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(tmp, "wb") as handle:
            np.savez(handle, content=content, **named)
        os.replace(tmp, path)  # readers see no file or the whole one
    except OSError as err:
        with contextlib.suppress(OSError):
            tmp.unlink()
        warnings.warn(
            f"mnist1d: could not cache the generated arrays in {path.parent} ({err}); they are "
            "generated again by every process",
            RuntimeWarning,
            stacklevel=3,
        )


def load_mnist1d(data_dir: str | Path, num_samples: int) -> Mnist1dArrays:
    """MNIST-1D of ``num_samples``: from the cache in ``data_dir``, or generated and cached."""
    arguments = mnist1d_arguments(num_samples)
    key = mnist1d_cache_key(arguments)
    path = mnist1d_cache_path(data_dir, arguments)
    cached = _read_cache(path, key, arguments)
    if cached is not None:
        return cached
    arrays = generate_mnist1d(arguments)
    _write_cache(path, key, arrays)
    return arrays


def mnist1d_data(*, data_dir: str, settings: TaskSettings) -> tuple[Any, ...]:
    """The ``mnist1d`` data set: N = ``settings.mnist1d_samples`` (0.8 N train), C = 10."""
    x_train, y_train, x_test, y_test = load_mnist1d(data_dir, settings.mnist1d_samples)
    return (x_train, y_train), (x_test, y_test), 10
