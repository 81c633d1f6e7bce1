"""The whole app in-process: ServerApp logic + real ClientApp on digits over the fake Grid."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import torch
from fake_grid import app_grid, make_contexts
from run_results import lines

from channel import CellConfig
from fedcgd_config.settings import default_run_config
from server_app.app import run_federation
from server_app.config import parse_run_config
from server_app.run_folder.results import MODEL_FILE


def run_inprocess(tmp_path: Path, name: str, *, cohorts: bool = True, **overrides) -> Path:
    run_config = default_run_config()
    run_config.update({"num-devices": 6, "num-server-rounds": 2, "channel.availability-prob": 0.8})
    run_config.update(overrides)
    run_config["result-dir"] = str(tmp_path / name)
    nodes = [9000 + 13 * i for i in range(run_config["num-devices"])]
    contexts = make_contexts(nodes, run_config, len(nodes))
    grid = app_grid(contexts, cohorts=cohorts)
    run_federation(grid, parse_run_config(run_config))
    return tmp_path / name


@pytest.mark.parametrize(
    ("policy", "protocol"), [("fedcgd-fscd", "train-all"), ("bc", "channel"), ("all", "channel")]
)
def test_every_protocol_gives_the_schedules_and_model_of_the_query_protocol(
    tmp_path, policy, protocol
):
    # One device at a time: a device's computation is then the same in every protocol, bit for
    # bit on any machine (in cohorts the devices trained together differ between them).
    a = run_inprocess(tmp_path, protocol, policy=policy, protocol=protocol, cohorts=False)
    b = run_inprocess(tmp_path, "query", policy=policy, protocol="query", cohorts=False)
    lines_a, lines_b = lines(a), lines(b)
    assert [x["scheduled"] for x in lines_a] == [x["scheduled"] for x in lines_b]
    assert [x["wemd"] for x in lines_a] == [x["wemd"] for x in lines_b]
    assert any(x["num_scheduled"] > 0 for x in lines_b)
    if protocol == "channel":  # rules that need the channel only skip the query phase
        assert all(x["query_s"] == 0.0 for x in lines_a)
    else:  # in train-all every available device trained, in query only the scheduled ones
        assert sum(x["num_available"] for x in lines_a) >= sum(x["num_scheduled"] for x in lines_b)
    model_a, model_b = torch.load(a / MODEL_FILE), torch.load(b / MODEL_FILE)
    assert model_a.keys() == model_b.keys()
    assert all(torch.equal(model_a[k], model_b[k]) for k in model_a)


def test_every_cell_setting_is_a_channel_key():
    """channel.<key> for every CellConfig field but num_devices; errors name the bad key."""
    run_config = default_run_config()
    cell_keys = {f"channel.{f.name.replace('_', '-')}" for f in dataclasses.fields(CellConfig)}
    assert cell_keys - {"channel.num-devices", "channel.pathloss-model"} == {
        key for key in run_config if key.startswith("channel.")
    } - {"channel.model", "channel.model-bits", "channel.trace"}
    assert parse_run_config(run_config).cell.redraw_los_each_round is True
    changed = {"channel.noise-figure-db": 7.5, "channel.redraw-los-each-round": False,
               "channel.redraw-shadowing-each-round": False}  # fmt: skip
    cell = parse_run_config({**run_config, **changed}).cell
    assert cell.noise_figure_db == 7.5
    assert cell.redraw_los_each_round is False and cell.redraw_shadowing_each_round is False
    # The message explains with other fields (pathloss_model, min_distance_m): the key is the
    # field CellConfig names first.
    bad_settings = [
        ({"channel.model": "tr38901", "channel.h-bs-m": 1.0}, "h-bs-m"),
        ({"channel.min-distance-m": 0.0, "channel.h-ut-m": 10.0}, "h-ut-m"),
        ({"channel.radius-m": 5.0}, "radius-m"),
    ]
    for changes, key in bad_settings:
        with pytest.raises(ValueError, match=rf"^run-config key 'channel\.{key}': "):
            parse_run_config({**run_config, **changes})
