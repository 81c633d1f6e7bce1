"""MNIST-1D: the generated data set (``dataset = "mnist1d"``) and its cache; whole runs on it:
tests/test_cohort_execution.py. The oracles are the ``mnist1d`` package itself (its
``make_dataset`` called directly) and counts worked out by hand in the comments.
"""

from __future__ import annotations

import importlib.metadata
import pickle
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from client_app import per_sample_norms as psn
from fedcgd_config.settings import TaskSettings, default_run_config, unread_settings
from fedcgd_task.datasets import load_data
from fedcgd_task.datasets import mnist1d as mnist1d_module
from fedcgd_task.datasets.mnist1d import (
    generate_mnist1d,
    load_mnist1d,
    mnist1d_arguments,
    mnist1d_cache_path,
)

#: A small sample count: 20 of each digit, int(200 * 0.8) = 160 training and 40 test samples.
SMALL_N = 200


def settings_for(data_dir: Path, samples: int) -> TaskSettings:
    config = {**default_run_config(), "dataset": "mnist1d", "data-dir": str(data_dir)}
    return TaskSettings.from_run_config({**config, "mnist1d-samples": samples})


def package_dataset(samples: int) -> dict[str, Any]:
    """The oracle: the package's own make_dataset with its default arguments but num_samples."""
    from mnist1d.data import get_dataset_args, make_dataset

    args = get_dataset_args()
    args.num_samples = samples
    return make_dataset(args)  # seeds numpy's global generator itself


def test_arrays_are_the_packages_make_dataset_with_its_defaults_and_split_on_any_thread(tmp_path):
    x_train, y_train, x_test, y_test = load_mnist1d(tmp_path, SMALL_N)
    expected = package_dataset(SMALL_N)
    assert x_train.shape == (160, 1, 40) and x_test.shape == (40, 1, 40)
    assert x_train.dtype == x_test.dtype == np.float32
    assert y_train.dtype == y_test.dtype == np.int64
    np.testing.assert_array_equal(x_train[:, 0, :], expected["x"].astype(np.float32))
    np.testing.assert_array_equal(x_test[:, 0, :], expected["x_test"].astype(np.float32))
    np.testing.assert_array_equal(y_train, expected["y"])
    np.testing.assert_array_equal(y_test, expected["y_test"])
    # 200 // 10 = 20 samples of each digit over both sets.
    counts = np.bincount(y_train, minlength=10) + np.bincount(y_test, minlength=10)
    assert counts.tolist() == [20] * 10
    # The package draws from numpy's global generator: threads generate one at a time.
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: generate_mnist1d(mnist1d_arguments(SMALL_N)), range(8)))
    for x_train, *_ in results:
        np.testing.assert_array_equal(x_train[:, 0, :], expected["x"].astype(np.float32))


def test_the_cache_is_read_for_the_same_arguments_only_and_the_global_random_states_stay(
    tmp_path, monkeypatch
):
    np.random.seed(1234)  # noqa: NPY002 (the global state under test)
    random.seed(99)
    numpy_before = pickle.dumps(np.random.get_state())  # noqa: NPY002
    python_before = random.getstate()
    first = load_mnist1d(tmp_path, SMALL_N)  # generated (the package seeds both with 42)
    assert pickle.dumps(np.random.get_state()) == numpy_before  # noqa: NPY002
    assert random.getstate() == python_before
    files = sorted(p.name for p in tmp_path.iterdir())
    path = mnist1d_cache_path(tmp_path, mnist1d_arguments(SMALL_N))
    assert files == [path.name]  # no temporary file left behind
    assert path.name.startswith(f"mnist1d-{SMALL_N}-")
    assert len(path.stem) == len("mnist1d-200-") + 16
    stamp = path.stat().st_mtime_ns
    larger = load_mnist1d(tmp_path, 300)  # other arguments never read another file
    assert len(larger[1]) == 240 and len(first[1]) == 160  # int(300 * 0.8), int(200 * 0.8)
    names = {p.name for p in tmp_path.iterdir()}
    assert len(names) == 2 and any(n.startswith("mnist1d-300-") for n in names)

    def no_generation(arguments):
        raise AssertionError("generated again although the cache holds these arguments")

    monkeypatch.setattr(mnist1d_module, "generate_mnist1d", no_generation)
    second = load_mnist1d(tmp_path, SMALL_N)  # read from the cache
    assert pickle.dumps(np.random.get_state()) == numpy_before  # noqa: NPY002
    assert random.getstate() == python_before
    assert path.stat().st_mtime_ns == stamp
    for a, b in zip(first, second, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    # Every argument of make_dataset and the package version are in the key.
    arguments = mnist1d_arguments(SMALL_N)
    base = mnist1d_cache_path(tmp_path, arguments)
    for key, value in [("seed", 43), ("train_split", 0.7), ("padding", [36, 61])]:
        assert mnist1d_cache_path(tmp_path, {**arguments, key: value}) != base
    monkeypatch.setattr(importlib.metadata, "version", lambda name: "9.9.9")  # of mnist1d
    assert mnist1d_cache_path(tmp_path, arguments) != base


def test_a_foreign_or_broken_cache_is_replaced_and_an_unwritable_folder_costs_only_it(tmp_path):
    path = mnist1d_cache_path(tmp_path, mnist1d_arguments(SMALL_N))
    zeros = np.zeros((1, 1, 40), np.float32), np.zeros(1, np.int64)
    np.savez(path, key=np.array("another key"), x_train=zeros[0], y_train=zeros[1])
    fresh = generate_mnist1d(mnist1d_arguments(SMALL_N))
    loaded = load_mnist1d(tmp_path, SMALL_N)
    np.testing.assert_array_equal(loaded[0], fresh[0])
    path.write_bytes(b"not a zip file")
    np.testing.assert_array_equal(load_mnist1d(tmp_path, SMALL_N)[2], fresh[2])
    with np.load(path) as data:  # rewritten with this key
        np.testing.assert_array_equal(data["x_test"], fresh[2])
    blocker = tmp_path / "a-file"  # a data folder that cannot be made costs only the cache
    blocker.write_text("")
    with pytest.warns(RuntimeWarning, match="could not cache"):
        arrays = load_mnist1d(blocker / "data", SMALL_N)
    assert len(arrays[0]) == 160


def test_the_sample_count_reaches_the_generator_and_is_unread_where_it_changes_nothing(tmp_path):
    train, test = load_data("mnist1d", str(tmp_path), settings_for(tmp_path, SMALL_N))
    assert (len(train), len(test)) == (160, 40)
    assert train.input_shape == (1, 40) and train.num_classes == test.num_classes == 10
    x, y = train.tensors()
    assert x.dtype == torch.float32 and y.dtype == torch.int64
    assert set(np.unique(np.concatenate([train.labels, test.labels]))) == set(range(10))
    # The package standardises the whole set (training and test) to mean 0, std 1.
    values = np.concatenate([np.asarray(train.inputs), np.asarray(test.inputs)]).astype(np.float64)
    assert abs(values.mean()) < 1e-5 and abs(values.std() - 1.0) < 1e-5
    assert default_run_config()["mnist1d-samples"] == 20000
    assert settings_for(tmp_path, 20000).model == "cnn1d"  # auto
    # the data folder and the sample count are unread where they change nothing

    def task(dataset: str) -> dict[str, Any]:
        return {"task": {"dataset": dataset}}

    assert "task.data_dir" in unread_settings(task("mnist1d"))  # only a cache
    assert "task.mnist1d_samples" not in unread_settings(task("mnist1d"))
    for dataset in ("digits", "cifar10", "cifar100"):
        assert "task.mnist1d_samples" in unread_settings(task(dataset))
    assert "task.data_dir" not in unread_settings(task("cifar10"))
    assert "task.mnist1d_samples" not in unread_settings(task("/abs/mine.py:load"))


def test_an_unbatched_conv1d_input_is_refused_during_the_pass():
    # A batch of 6 samples [6, 8] read by Conv1d(6, 6, 3) as ONE unbatched input of 6 channels:
    # batch sizes match (6 in, 6 out) but the samples are mixed; the one-pass method refuses.
    y = torch.tensor([0, 1, 2, 0, 1, 2])
    mixing = nn.Sequential(nn.Conv1d(6, 6, 3), nn.Linear(6, 3))
    with pytest.raises(psn.UnsupportedModelError, match="unbatched input"):
        psn.per_sample_grad_norms(mixing, torch.randn(6, 8), y)
