"""A researcher's own data set and model, named in the run config alone (no project edit).

The modules are written into a folder outside the project (pytest's ``tmp_path``): a package
``toyproblem`` with a synthetic 3-class problem (numpy, fixed seed) and a tiny torch model, plus
one file of bad cases. Every expected count below is computed by hand in the comments.
"""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from run_results import comparable, same_model, whole_run
from subprocesses import FEDCGD, run_ok
from task_settings import refused_before_start
from torch import nn

from experiments.cli import invoke
from experiments.run.flwr_run import run_flwr
from experiments.run.run_config import format_run_config
from fedcgd_task.models import build_model

PROJECT = Path(__file__).resolve().parents[1]

#: The synthetic problem: 3 classes, 6 features, 40 + 10 samples per class.
FEATURES, CLASSES, TRAIN_PER_CLASS, TEST_PER_CLASS = 6, 3, 40, 10

DATA_MODULE = """
import os

import numpy as np


def _blobs(rng, per_class):
    centres = 2.0 * np.eye(3, 6)  # class c sits at 2 e_c
    y = np.repeat(np.arange(3), per_class)
    return centres[y] + 0.5 * rng.standard_normal((y.size, 6)), y


def load(data_dir: str):
    assert os.path.isabs(data_dir), data_dir  # the run's data-dir, made absolute
    rng = np.random.default_rng(7)
    return _blobs(rng, 40), _blobs(rng, 10)
"""

MODEL_MODULE = """
from torch import nn


def build(num_classes, input_shape):
    (features,) = input_shape
    return nn.Sequential(nn.Linear(features, 5), nn.Tanh(), nn.Linear(5, num_classes))
"""

#: A model with a LayerNorm (outside the one-pass σ̂: vmap); with DATA_MODULE, one file.
LAYER_NORM_MODEL = """
from torch import nn


def build(num_classes, input_shape):
    return nn.Sequential(
        nn.Linear(input_shape[0], 5), nn.LayerNorm(5), nn.Tanh(), nn.Linear(5, num_classes)
    )
"""

BAD_MODULE = """
import numpy as np
import torch
from torch import nn

rng = np.random.default_rng(0)
X, Y = rng.standard_normal((30, 6)), np.repeat(np.arange(3), 10)


def needs_two(path, size):
    return (X, Y), (X, Y)


def raises():
    raise OSError("disk\\nerror")


def wide(num_classes, input_shape):
    return nn.Linear(input_shape[0], num_classes + 1)


not_callable = 42


def not_a_module(num_classes, input_shape):
    return lambda x: x


def broken(num_classes, input_shape):
    raise TypeError("no such layer")


class Tricky(nn.Module):
    # A LayerNorm sends σ̂ to torch.func.vmap, and vmap cannot branch on a tensor's value.
    def __init__(self, features, num_classes):
        super().__init__()
        self.norm, self.out = nn.LayerNorm(features), nn.Linear(features, num_classes)

    def forward(self, x):
        h = self.norm(x)
        return self.out(h) if float(h.sum()) >= 0 else -self.out(h)


def tricky(num_classes, input_shape):
    return Tricky(input_shape[0], num_classes)


def integral(num_classes, input_shape):
    return nn.Sequential(nn.Linear(input_shape[0], num_classes), Rounded())


class Rounded(nn.Module):
    def forward(self, x):
        return x.round().long()
"""

#: Tiny settings of every run here (120 training samples: 30 per device).
SMALL = {
    "num-devices": 4, "num-server-rounds": 3, "local-steps": 2, "batch-size": 8,
    "channel.availability-prob": 1.0,
}  # fmt: skip
#: Parameters of MODEL_MODULE's model for 6 features, 3 classes:
#: Linear(6, 5) 6*5 + 5 = 35, Linear(5, 3) 5*3 + 3 = 18; 35 + 18 = 53.
MODEL_PARAMETERS = 53
#: FILE_MODULE's model adds a LayerNorm(5): weight and bias, 5 + 5 = 10; 53 + 10 = 63.
FILE_MODEL_PARAMETERS = 63


@pytest.fixture
def user_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder outside the project: package ``toyproblem`` and the files of this module."""
    folder = tmp_path_factory.mktemp("researcher")
    package = folder / "toyproblem"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "data.py").write_text(textwrap.dedent(DATA_MODULE))
    (package / "nets.py").write_text(textwrap.dedent(MODEL_MODULE))
    (folder / "toy_file.py").write_text(textwrap.dedent(DATA_MODULE + LAYER_NORM_MODEL))
    (folder / "bad_cases.py").write_text(textwrap.dedent(BAD_MODULE))
    assert not folder.resolve().is_relative_to(PROJECT)
    return folder


def assert_two_rounds_uploaded(result_dir: Path, num_parameters: int) -> None:
    """Rounds 1 and 2 written, each with an upload; the hand-computed sizes in ``config.json``."""
    lines = [json.loads(x) for x in (result_dir / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [1, 2]
    assert all(line["num_uploaded"] >= 1 for line in lines)
    config = json.loads((result_dir / "config.json").read_text())
    assert config["num_classes"] == CLASSES and config["num_parameters"] == num_parameters


# mlp on 6 features, 3 classes: (6 + 1) * 64 + (64 + 1) * 3 = 448 + 195 = 643. A package on
# the path (on the command line, with PYTHONPATH: test_extension_points).
@pytest.mark.parametrize(
    ("data", "model", "built", "size"),
    [
        ("{file}:load", "{file}:build", None, FILE_MODEL_PARAMETERS),
        ("{file}:load", "auto", "mlp", 643),
        ("toyproblem.data:load", "toyproblem.nets:build", None, MODEL_PARAMETERS),
    ],
)
def test_files_by_absolute_path_or_a_package_run_in_process_and_auto_sizes_the_mlp(
    user_folder, tmp_path, monkeypatch, data, model, built, size
):
    if not data.startswith("{file}"):  # a file reference is loaded by its path alone
        monkeypatch.syspath_prepend(str(user_folder))
    out, file = tmp_path / "run", user_folder / "toy_file.py"
    data, model = data.format(file=file), model.format(file=file)
    run_config = {**SMALL, "dataset": data, "model": model, "result-dir": str(out)}
    assert invoke(["inprocess", "--run-config", format_run_config(run_config)]) == 0
    # three rounds, the hand-computed sizes, an accuracy over the 30 test samples
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [line["round"] for line in lines] == [1, 2, 3]
    # Every device is available (p_a = 1), so FedCGD asks each for σ̂ every round.
    assert all(line["sigma"] is not None and math.isfinite(line["sigma"]) for line in lines)
    assert all(line["num_scheduled"] >= 1 for line in lines)
    config = json.loads((out / "config.json").read_text())
    assert config["num_classes"] == CLASSES and config["num_parameters"] == size
    assert config["task"]["dataset"] == data and config["task"]["model"] == (built or model)
    final = json.loads((out / "summary.json").read_text())["final_accuracy"]
    assert isinstance(final, float) and 0.0 <= final <= 1.0
    correct = final * CLASSES * TEST_PER_CLASS  # accuracy over the 30 test samples
    assert abs(correct - round(correct)) < 1e-9
    assert json.loads((out / "status.json").read_text())["state"] == "completed"


BAD = "bad_cases.py"


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("dataset", "no_such_package_xyz.data:load", "no module named 'no_such_package_xyz'"),
        ("dataset", f"{{folder}}/{BAD}:nowhere", f"{BAD} has no attribute 'nowhere'"),
        ("dataset", "{folder}/missing.py:load", "missing.py does not exist"),
        ("dataset", "mnist", 'one of "digits", "cifar10", "cifar100", "mnist1d" or a function'),
        ("dataset", "./bad_cases.py:load", "is not a reference; allowed:"),
        ("dataset", f"{{folder}}/{BAD}:needs_two", "missing a required argument: 'path'); a da"),
        ("dataset", f"{{folder}}/{BAD}:raises", "the function raised OSError: disk"),
        ("dataset", f"{{folder}}/{BAD}:not_callable", "of type int, not a function"),
        ("model", "vgg", 'one of "auto", "mlp", "cnn", "resnet18gn", "cnn1d" or a function'),
        ("model", f"{{folder}}/{BAD}:wide", "outputs of shape (2, 4), not (2, 3)"),
        ("model", f"{{folder}}/{BAD}:not_a_module", "returned a function, not a torch.nn.Module"),
        ("model", f"{{folder}}/{BAD}:broken", "raised TypeError: no such layer"),
        ("model", f"{{folder}}/{BAD}:tricky", "σ̂ (per-sample gradient norms, client_app/sig"),
        ("model", f"{{folder}}/{BAD}:integral", "outputs torch.int64, not a float tensor"),
        ("model", "cnn", "does not fit dataset '{folder}/toy_file.py:load' (inputs 6, 3 classes)"),
    ],
)
def test_a_bad_data_set_or_model_is_refused_before_the_start_in_one_line(
    user_folder, tmp_path, capsys, key, value, message
):
    value, message = value.format(folder=user_folder), message.format(folder=user_folder)
    settings = {"dataset": f"{user_folder / 'toy_file.py'}:load", "model": "auto", key: value}
    out = tmp_path / "never"
    run_config = {**SMALL, **settings, "result-dir": str(out)}
    line = refused_before_start(capsys, run_config, tmp_path / "out")
    assert line.startswith(f"error: run-config key '{key}'"), line
    assert message in line and repr(value) in line, line
    assert not out.exists()


def test_a_model_function_is_built_from_the_run_seed(user_folder):
    reference = f"{user_folder / 'toyproblem' / 'nets.py'}:build"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(11)
        expected = nn.Sequential(nn.Linear(6, 5), nn.Tanh(), nn.Linear(5, 3)).state_dict()
    before = torch.random.get_rng_state()
    built = build_model(reference, 3, (6,), seed=11).state_dict()
    assert torch.equal(torch.random.get_rng_state(), before)  # the global generator untouched
    assert all(torch.equal(built[k], expected[k]) for k in expected)


#: Data and a model drawing from the global generators, as augmentation code often does.
GLOBAL_DRAWS = """
import random

import numpy as np
import torch
from torch import nn


def load(data_dir):
    y = np.repeat(np.arange(3), 40)
    x = 2.0 * np.eye(3, 6)[y] + 0.5 * np.random.randn(y.size, 6)
    return (x, y), (x[::4], y[::4])


class Noisy(nn.Module):
    def __init__(self, features, num_classes):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, 5), nn.Tanh(), nn.Linear(5, num_classes))
        with torch.no_grad():
            self.body[0].weight.add_(torch.from_numpy(np.random.rand(5, features)).float())

    def forward(self, x):
        if self.training:
            x = x * (1.0 + 0.1 * random.random()) + 0.1 * torch.from_numpy(
                np.random.rand(*x.shape)
            ).float()
        return self.body(x)


def build(num_classes, input_shape):
    return Noisy(input_shape[0], num_classes)
"""


@pytest.mark.parametrize("per_device", [True, False], ids=["per-device", "cohorts"])
def test_data_and_model_drawing_from_the_global_generators_give_one_run_per_seed(
    tmp_path, per_device
):
    # Two runs with one seed, each calling the data-set function afresh (another data-dir):
    # numpy's and Python's global generators went on from wherever they were, so the data,
    # the initial model and each training step's noise differed.
    module = tmp_path / "global_draws.py"
    module.write_text(textwrap.dedent(GLOBAL_DRAWS))
    values = {**SMALL, "seed": 5, "dataset": f"{module}:load", "model": f"{module}:build"}
    for run in ("a", "b"):
        values["data-dir"] = str(tmp_path / f"data-{run}")
        whole_run(tmp_path / run, values, per_device=per_device)
    assert comparable(tmp_path / "a") == comparable(tmp_path / "b")
    assert same_model(tmp_path / "a", tmp_path / "b")


@pytest.mark.slow
def test_the_launcher_imports_the_users_modules_in_every_process(user_folder, tmp_path):
    """``make run RUN_CONFIG=...`` (``flwr run`` on our SuperLink): the ServerApp and the Ray
    workers import the data set from ``PYTHONPATH`` (passed on to the SuperLink, the simulation
    and Ray's workers), the model from a file path."""
    out = tmp_path / "run"
    model = f"{user_folder / 'toy_file.py'}:build"
    settings = {**SMALL, "num-devices": 2, "num-server-rounds": 2}
    text = format_run_config(
        {**settings, "dataset": "toyproblem.data:load", "model": model, "result-dir": str(out)}
    )
    env = {**os.environ, "PYTHONPATH": str(user_folder)}
    run_ok([FEDCGD, "run", "--run-config", text], timeout=900, env=env)
    assert_two_rounds_uploaded(out, FILE_MODEL_PARAMETERS)  # devices trained in Ray workers
    final = json.loads((out / "summary.json").read_text())["final_accuracy"]
    assert isinstance(final, float) and 0.0 <= final <= 1.0


@pytest.mark.slow
def test_a_deployment_imports_modules_shipped_in_the_app_folder(tmp_path):
    """SuperNode processes, no ``PYTHONPATH``: the two modules and a policy (the proportional-
    fair example) come only from the app bundle (FAB) ``flwr run`` ships to the SuperLink and the
    SuperNodes; ``server_app`` and ``client_app`` from the installed project."""
    app = tmp_path / "app"
    app.mkdir()
    (app / "pyproject.toml").write_text((PROJECT / "pyproject.toml").read_text())
    (app / "shipped_data.py").write_text(textwrap.dedent(DATA_MODULE))
    (app / "shipped_nets.py").write_text(textwrap.dedent(MODEL_MODULE))
    example = (PROJECT / "examples" / "proportional_fair.py").read_text()
    (app / "shipped_policy.py").write_text(example)  # the ServerApp imports it from the bundle
    assert str(app) not in os.environ.get("PYTHONPATH", "")
    out = tmp_path / "run"
    settings = {**SMALL, "num-devices": 2, "num-server-rounds": 2, "result-dir": str(out)}
    settings.update(dataset="shipped_data:load", model="shipped_nets:build")
    settings.update({"policy": "shipped_policy:ProportionalFair", "policy-params.window": 3})
    done = run_flwr(settings, num_supernodes=2, deployment=True, project_dir=app)
    assert "shipped_data" not in sys.modules  # imported by the apps' processes only
    recorded = json.loads((out / "config.json").read_text())
    assert recorded["policy_params"] == {"window": 3} and recorded["protocol"] == "channel"
    status = json.loads((out / "status.json").read_text())
    assert status["state"] == "completed", (status, done.stdout[-3000:])
    assert_two_rounds_uploaded(out, MODEL_PARAMETERS)
