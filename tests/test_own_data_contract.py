"""The data-set and model contract on its own: the built-ins through it, and its rules.

No user folder and no run here (those are in tests/test_own_data_model.py): the built-in data
sets and models must come out as they always did, and each rule of the contract is checked on
hand-written arrays.
"""

from __future__ import annotations

import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch
from torch import nn

from fedcgd_config.settings import TaskSettings, default_run_config
from fedcgd_task.datasets import check_data, load_data
from fedcgd_task.models import build_model


def test_digits_through_the_data_set_contract_equals_scikit_learns_images():
    # The old loader's definition, from scikit-learn directly: stratified 80 / 20 split with
    # random_state 0, rows sorted, x = pixel / 16 as float32 [N, 1, 8, 8].
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    bunch = load_digits()
    rows = train_test_split(
        np.arange(bunch.target.size), test_size=0.2, random_state=0, stratify=bunch.target
    )
    train, test = load_data("digits", "/nowhere")
    for split, index in zip((train, test), rows, strict=True):
        index = np.sort(index)
        x, y = split.tensors()
        expected = (bunch.images[index] / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
        assert torch.equal(x, torch.from_numpy(expected))
        assert torch.equal(y, torch.from_numpy(bunch.target[index].astype(np.int64)))
        assert split.num_classes == 10 and split.input_shape == (1, 8, 8)
    assert (len(train), len(test)) == (1437, 360)


@pytest.mark.parametrize("seed", [0, 5])
def test_the_digits_mlp_is_initialised_bit_for_bit_as_before(seed):
    # The MLP as it was always built: torch.manual_seed(seed), then Flatten, Linear(64, 64),
    # ReLU, Linear(64, 10), the layers drawing their weights in that order.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reference = nn.Sequential(nn.Flatten(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10))
    ours = build_model("mlp", 10, (1, 8, 8), seed=seed).state_dict()
    assert sorted(ours) == ["net.1.bias", "net.1.weight", "net.3.bias", "net.3.weight"]
    for key, value in reference.state_dict().items():
        assert torch.equal(ours[f"net.{key}"], value), key


def test_integer_inputs_become_float32_and_num_classes_may_exceed_the_labels():
    x = np.arange(12, dtype=np.int16).reshape(4, 3)
    y = np.array([0, 1, 1, 0], dtype=np.uint8)
    train, test = check_data(((x, y), (x[:2], y[:2]), np.int64(5)), "m:load")
    assert train.num_classes == test.num_classes == 5  # given, though labels reach 1 only
    xt, yt = train.tensors([3, 0])
    assert xt.dtype == torch.float32 and xt.tolist() == [[9.0, 10.0, 11.0], [0.0, 1.0, 2.0]]
    assert yt.dtype == torch.int64 and yt.tolist() == [0, 0]
    # Without num_classes, C is the largest label of both sets + 1: 2 here.
    assert check_data(((x, y), (x, y)), "m:load")[0].num_classes == 2


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (
            ((np.zeros((0, 2)), np.zeros(0, int)), (np.zeros((1, 2)), [1])),
            "x_train has shape (0, 2) and y_train (0,)",
        ),
        (
            ((np.zeros((2, 2)), [0, 0]), (np.zeros((2, 2)), [0, 0])),
            "num_classes = 1 (largest label + 1); a classification task needs >= 2",
        ),
        (((np.zeros((3, 2)), [0, 1]), (np.zeros((2, 2)), [0, 1])), "x_train has shape (3, 2) and"),
        (((np.zeros((2, 0)), [0, 1]), (np.zeros((2, 0)), [0, 1])), "x_train has shape (2, 0) and"),
        (((np.zeros((2, 2)), [[0], [1, 2]]), (np.zeros((2, 2)), [0, 1])), "y_train cannot be rea"),
        (
            ((torch.zeros(2, 2, requires_grad=True), [0, 1]), (np.zeros((2, 2)), [0, 1])),
            "x_train cannot be read as an array (Can't call numpy() on Tensor that requires grad",
        ),
        ([1, 2, 3, 4, 5, 6], "the function returned a list; it must return ((x_train, y_train),"),
        (((np.zeros(2), [0, 1]), (np.zeros(2), [0, 1])), "x_train has shape (2,) and"),
        (((np.zeros((2, 2)), [0, -1]), (np.zeros((2, 2)), [0, 1])), "y_train holds label -1"),
        (
            ((np.zeros((2, 2)), [0, 1]), (np.zeros((2, 2)), [0, 1]), 1),
            "num_classes = 1 (returned); a classification task needs >= 2",
        ),
        (((np.full((2, 2), 1e39), [0, 1]), (np.zeros((2, 2)), [0, 1])), "not finite in float32"),
        (((np.array(["a", "b"]), [0, 1]), (np.zeros((2, 2)), [0, 1])), "x_train has dtype <U1"),
        (((np.zeros((2, 2)), [[0, 1]]), (np.zeros((2, 2)), [0, 1])), "and y_train (1, 2)"),
        (((np.zeros((2, 2)), [0, 1]), (np.zeros((2, 3)), [0, 1])), "x_train holds inputs of sh"),
        (((np.zeros((2, 2)), [0, 1]),), "the function returned a tuple of (tuple); it must"),
        ((np.zeros((2, 2)), np.zeros(2)), "returned a tuple of (ndarray, ndarray); it must"),
        (((np.zeros((2, 2)), [0.0, 1.0]), (np.zeros((2, 2)), [0, 1])), "y_train has dtype float"),
        (((np.float64(3.0), [0]), (np.zeros((2, 2)), [0, 1])), "x_train has shape () and"),
    ],
)
def test_each_rule_of_the_contract_is_one_line_naming_the_key(result, message):
    with warnings.catch_warnings(), pytest.raises(ValueError) as info:
        warnings.simplefilter("error")  # one line: no numpy warning before it either
        check_data(result, "m:load")
    text = str(info.value)
    assert text.startswith("run-config key 'dataset' = 'm:load': ") and "\n" not in text
    assert message in text, text


def test_a_data_dir_keyword_or_kwargs_receive_the_folder_and_nothing_else_is_passed(tmp_path):
    module = tmp_path / "dirs.py"
    module.write_text(
        textwrap.dedent(
            """
            import numpy as np

            SEEN = []

            def _data(n):
                return (np.zeros((n, 1)), np.arange(n) % 2), (np.zeros((2, 1)), [0, 1])

            def keyword(*, data_dir, scale=3):
                SEEN.append(("keyword", data_dir, scale))
                return _data(4)

            def kwargs(**options):
                SEEN.append(("kwargs", options))
                return _data(6)

            def bare(scale=2):
                SEEN.append(("bare", scale))
                return _data(8)
            """
        )
    )
    folder = str(tmp_path / "data")
    sizes = [
        len(load_data(f"{module}:{name}", folder)[0]) for name in ("keyword", "kwargs", "bare")
    ]
    assert sizes == [4, 6, 8]
    from fedcgd_config.imports import import_object

    seen = import_object(f"{module}:SEEN", "dataset")
    assert seen == [("keyword", folder, 3), ("kwargs", {"data_dir": folder}), ("bare", 2)]


def test_settings_check_a_reference_by_its_form_without_importing_it():
    run_config = {**default_run_config(), "dataset": "not_imported_yet.data:load", "model": "auto"}
    settings = TaskSettings.from_run_config(run_config)
    assert settings.dataset == "not_imported_yet.data:load" and settings.model == "mlp"
    assert "not_imported_yet" not in sys.modules
