"""Loading is safe and bounded: no code from data files, verified caches, limits on every size."""

from __future__ import annotations

import io
import json
import os
import pickle
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest
from command_batch import in_one_process
from fake_runs import write_run
from run_results import whole_run

from experiments.cli import invoke
from experiments.run.run_config import format_run_config
from fedcgd_task.datasets.images import load_cifar
from fedcgd_task.datasets.mnist1d import (
    load_mnist1d,
    mnist1d_arguments,
    mnist1d_cache_key,
    mnist1d_cache_path,
    mnist1d_content_digest,
)

N = 400  # MNIST-1D samples of these tests


def refused_line(done: subprocess.CompletedProcess[str]) -> str:
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(err) == 1, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return err[0]


def cifar_batch(n: int, seed: int, protocol: int = 2) -> bytes:
    rng = np.random.default_rng(seed)
    entry = {
        "batch_label": f"batch {seed}",
        "labels": rng.integers(0, 10, n).tolist(),
        "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
        "filenames": [f"img{i}.png" for i in range(n)],
    }
    return pickle.dumps(entry, protocol=protocol)


def cifar_folder(root: Path, protocol: int = 2, n: int = 4) -> Path:
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    for i, name in enumerate([*(f"data_batch_{k}" for k in range(1, 6)), "test_batch"]):
        (folder / name).write_bytes(cifar_batch(n, i, protocol))
    return folder


class RunsCode:
    """What a crafted batch holds: unpickling it calls ``os.system`` (the marker file)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_cifar_batch_runs_no_code_and_is_refused_in_one_line(tmp_path, capsys):
    folder = cifar_folder(tmp_path / "data")
    marker = tmp_path / "code-ran"
    crafted = {"data": RunsCode(marker), "labels": [0]}
    (folder / "data_batch_3").write_bytes(pickle.dumps(crafted, protocol=2))
    # sanity: plain pickle.load would run it
    assert not marker.exists()
    values = {"dataset": "cifar10", "data-dir": str(tmp_path / "data"), "num-devices": 4}
    assert invoke(["inprocess", "--run-config", format_run_config(values)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert not marker.exists(), "the crafted pickle ran code"
    assert "data_batch_3" in line and "refers to posix.system" in line, line
    assert "which a CIFAR batch never holds" in line


@pytest.mark.parametrize("protocol", [2, 4, pickle.HIGHEST_PROTOCOL, "numpy-1"])
def test_cifar_batches_of_every_pickle_protocol_or_numpy_load_the_same_arrays(tmp_path, protocol):
    cifar_folder(tmp_path / "a", protocol=2)
    folder = cifar_folder(tmp_path / "b", protocol=2 if protocol == "numpy-1" else protocol)
    if protocol == "numpy-1":  # it named its reconstruction numpy.core.multiarray._reconstruct
        data = (folder / "data_batch_1").read_bytes()
        old = data.replace(b"numpy._core.multiarray\n", b"numpy.core.multiarray\n")
        assert old != data
        (folder / "data_batch_1").write_bytes(old)
    a = load_cifar("cifar10", tmp_path / "a", train=True, download=False)
    b = load_cifar("cifar10", tmp_path / "b", train=True, download=False)
    assert np.array_equal(a.inputs.pixels, b.inputs.pixels) and np.array_equal(a.labels, b.labels)
    expected = pickle.loads(cifar_batch(4, 0))
    assert np.array_equal(a.inputs.pixels[:4].reshape(4, -1), expected["data"])
    assert a.labels[:4].tolist() == expected["labels"]


@pytest.mark.parametrize(
    ("entry", "phrase"),
    [
        ([1, 2, 3], "holds a list, not a dict"),
        ({"data": np.zeros((2, 3072), dtype=np.float32), "labels": [0, 1]}, "not a uint8 array"),
        ({"data": np.zeros((2, 100), dtype=np.uint8), "labels": [0, 1]}, "100 values per image"),
        ({"data": np.zeros((2, 3072), dtype=np.uint8), "labels": [0, 10]}, "leave [0, 10)"),
        ({"data": np.zeros((2, 3072), dtype=np.uint8), "labels": [0]}, "not 2 integers"),
    ],
)
def test_a_batch_that_is_not_a_cifar_batch_is_one_line(tmp_path, entry, phrase):
    folder = cifar_folder(tmp_path)
    (folder / "data_batch_2").write_bytes(pickle.dumps(entry, protocol=2))
    with pytest.raises(ValueError, match="data_batch_2' is not a CIFAR batch") as err:
        load_cifar("cifar10", tmp_path, train=True, download=False)
    assert phrase in str(err.value) and "\n" not in str(err.value)


def test_a_cache_with_shifted_labels_or_declaring_a_huge_array_is_regenerated(tmp_path):
    truth = load_mnist1d(tmp_path, N)
    path = mnist1d_cache_path(tmp_path, mnist1d_arguments(N))
    with np.load(path) as data:
        saved = {name: data[name] for name in data.files}
    # the attack of the issue: the same key, the labels shifted by one class
    saved["y_train"] = (saved["y_train"] + 1) % 10
    with open(path, "wb") as handle:
        np.savez(handle, **saved)
    again = load_mnist1d(tmp_path, N)
    assert all(np.array_equal(a, b) for a, b in zip(again, truth, strict=True))
    with np.load(path) as data:  # and the file was rewritten
        assert np.array_equal(data["y_train"], truth[1])
    # a cache declaring a huge array, with the right digest: regenerated without reading it
    key = mnist1d_cache_key(mnist1d_arguments(N))
    with zipfile.ZipFile(path, "w") as archive:  # headers only: 10^7 x 10^7 float32
        headers = (("x_train", (10**7, 10**7), "<f4"), ("y_train", (320,), "<i8"),
                   ("x_test", (80, 1, 40), "<f4"), ("y_test", (80,), "<i8"))  # fmt: skip
        for name, shape, descr in headers:
            member = io.BytesIO()
            header = {"descr": descr, "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(member, header)
            archive.writestr(f"{name}.npy", member.getvalue())
        member = io.BytesIO()
        np.save(member, np.array(mnist1d_content_digest(key, truth)))
        archive.writestr("content.npy", member.getvalue())
    again = load_mnist1d(tmp_path, N)
    assert all(np.array_equal(a, b) for a, b in zip(again, truth, strict=True))


TOO_BIG = [
    ({"num-server-rounds": 10**12}, "'num-server-rounds' must be an integer in [1, 100000]"),
    ({"dataset": "mnist1d", "mnist1d-samples": 10**9}, "in [100, 1000000]"),
    ({"result-dir": "/tmp/" + "a" * 5000}, "'result-dir' holds 5005 characters"),
    ({"result-dir": "/tmp/" + "b" * 300}, "name of 300 bytes"),
    ({"data-dir": "/tmp/" + "c" * 300}, "'data-dir' holds a folder or file name of 300"),
    ({"channel.trace": "/tmp/" + "d" * 5000 + ".npz"}, "'channel.trace' holds"),
    ({"policy": "x" * 5000 + ":P"}, "'policy' holds 5002 characters"),
    ({"policy": "/tmp/" + "p" * 300 + ".py:P"}, "cannot be looked up (File name too long)"),
    ({"result-dir": "/tmp/two\nlines"}, "'result-dir' = '/tmp/two\\nlines' holds a control"),
    ({"dataset": "/tmp/" + "q" * 300 + ".py:f"}, "cannot be looked up (File name too long)"),
    ({"policy-params": "{a=" * 5000 + "1" + "}" * 5000}, "nested too deeply"),
]
#: A run-config item nested 5,000 deep (not a key's value: the item as typed).
DEEP_ITEM = "x=" + "[" * 5000 + "]" * 5000


@pytest.fixture(scope="module")
def refused() -> list[subprocess.CompletedProcess[str]]:
    """TOO_BIG's command lines, then DEEP_ITEM's, in one child process (command_batch.py)."""
    argvs = [["inprocess", "--run-config", format_run_config(values)] for values, _ in TOO_BIG]
    return in_one_process([*argvs, ["inprocess", "--run-config", DEEP_ITEM]])


@pytest.mark.parametrize("case", range(len(TOO_BIG)), ids=[p for _, p in TOO_BIG])
def test_sizes_beyond_the_bounds_are_refused_in_one_line(refused, case):
    line = refused_line(refused[case])
    assert TOO_BIG[case][1] in line, line


def test_a_run_config_item_or_a_config_json_nested_deeply_is_one_line(refused, tmp_path, capsys):
    line = refused_line(refused[-1])
    assert line.startswith("error: --run-config item 'x=[[[[") and "..." in line
    # a run's config.json nested deeply, read on resume
    folder = tmp_path / "run"
    whole_run(folder, {"num-devices": 4, "num-server-rounds": 2})
    (folder / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    again = {"num-devices": 4, "num-server-rounds": 3, "resume-from": str(folder)}
    assert invoke(["inprocess", "--run-config", format_run_config(again)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "config.json" in line and "nests deeper than 64 levels" in line


def test_plots_and_a_kept_comparison_run_with_a_torn_or_damaged_metrics_file(tmp_path, capsys):
    """Plots leave out a torn last line and refuse a damaged one; compare refuses a kept run's."""
    run = tmp_path / "run"
    write_run(run, {"policy": "bc"}, [{"round": r, "accuracy": 0.5} for r in (1, 2)])
    with open(run / "metrics.jsonl", "a") as handle:
        handle.write('{"round": 3, "accur')  # torn: the run was stopped while writing it
    assert invoke(["plot", str(run), "--out", str(tmp_path / "a.png")]) == 0
    assert (tmp_path / "a.png").stat().st_size > 0
    text = (run / "metrics.jsonl").read_text()
    (run / "metrics.jsonl").write_text(text.replace('{"round": 2', '{"round": 2, ]', 1))
    assert invoke(["plot", str(run), "--out", str(tmp_path / "b.png")]) == 2
    assert not (tmp_path / "b.png").exists()
    out = tmp_path / "compare"
    args = ["compare", "--engine", "inprocess", "--policies", "bc", "--out", str(out),
            "--run-config", "num-devices=4 num-server-rounds=2"]  # fmt: skip
    assert invoke(args) == 0
    capsys.readouterr()
    metrics = out / "bc" / "seed-0" / "metrics.jsonl"
    metrics.write_text(metrics.read_text()[:-30])  # a completed run, its last line torn
    assert invoke(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        f"error: {metrics}: holds 1 of the 2 rounds its summary.json says ran (damaged); move "
        "the folder away to run it again"
    ], err
    assert json.loads((out / "bc" / "seed-0" / "status.json").read_text())["state"] == "completed"
    summary = out / "bc" / "seed-0" / "summary.json"
    summary.write_text('{"final_acc')  # a torn summary: refused too, before anything starts
    assert invoke(args) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {summary}") and "JSON" in line, line
