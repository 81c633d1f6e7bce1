"""The channel as a plug-in: ``channel.model`` names a built-in or a researcher's class (the
Rayleigh example, examples/rayleigh_channel.py: checked against the cell it fades, then run)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from run_results import comparable, lines, same_model
from task_settings import refused_before_start

from channel import Cell, CellConfig
from examples.rayleigh_channel import RayleighChannel
from experiments.cli import invoke
from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import format_run_config
from server_app.config import run_folder_name

RAYLEIGH = "examples.rayleigh_channel:RayleighChannel"
MODEL_BITS = 1.0e5


def test_the_rayleigh_gain_is_the_cells_gain_times_exp1_draws_of_the_same_generator():
    config = CellConfig(num_devices=50)
    rayleigh = RayleighChannel(config, np.random.default_rng(7))
    reference = np.random.default_rng(7)
    cell = Cell(config, reference)  # the same drop and per-round draws, then V Exp(1) draws
    for _ in range(3):
        faded, plain = rayleigh.draw_round(MODEL_BITS), cell.draw_round(MODEL_BITS)
        fading = reference.exponential(1.0, 50)
        np.testing.assert_array_equal(faded.available, plain.available)
        np.testing.assert_array_equal(faded.gain_lin, plain.gain_lin * fading)
        np.testing.assert_array_equal(
            faded.min_bandwidth_hz, config.min_bandwidth_hz(MODEL_BITS, faded.gain_lin)
        )


def run_settings(result_dir: Path, **changes: Any) -> dict[str, Any]:
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir

    base = {"num-devices": 6, "num-server-rounds": 4, "seed": 3, "policy": "bc"}
    given = {**base, "result-dir": str(result_dir), **changes}
    return with_resolved_data_dir(validated_run_config(given))


def test_a_rayleigh_run_repeats_from_its_seed_resumes_bit_for_bit_and_compares(tmp_path, capsys):
    rayleigh = {"channel.model": RAYLEIGH, "checkpoint-every": 1}
    first, paper = tmp_path / "first", tmp_path / "paper"
    run_inprocess(run_settings(first, **rayleigh))
    run_inprocess(run_settings(paper, **{"checkpoint-every": 1}))
    # The fading changes the minimum bandwidths, so the budget BC uses differs from the cell's.
    used = [[line["bandwidth_used_hz"] for line in lines(run)] for run in (first, paper)]
    assert used[0] != used[1]
    recorded = json.loads((first / "config.json").read_text())
    assert recorded["channel_model"] == RAYLEIGH
    assert recorded["cell"]["pathloss_model"] == "paper"

    part = tmp_path / "part"  # its first two rounds run afresh from the seed, as first's did
    run_inprocess(run_settings(part, **rayleigh, **{"num-server-rounds": 2}))
    run_inprocess(run_settings(part, **rayleigh, **{"resume-from": str(part)}))
    assert comparable(part) == comparable(first)
    assert same_model(part, first)
    # a comparison runs it beside the built-in
    out = tmp_path / "compare"
    shared = "num-devices=4 num-server-rounds=2 seed=0"
    code = invoke(
        ["compare", "--engine", "inprocess", "--policies", "bc", "--out", str(out),
         "--channels", f"paper,{RAYLEIGH}", "--run-config", shared]
    )  # fmt: skip
    assert code == 0, capsys.readouterr().err
    runs = {n: out / f"channel={n}" / "bc" / "seed-0" for n in ("paper", "RayleighChannel")}
    for name, value in (("paper", "paper"), ("RayleighChannel", RAYLEIGH)):
        assert json.loads((runs[name] / "config.json").read_text())["channel_model"] == value
        assert (out / f"channel={name}" / "table.csv").is_file()
    # The Rayleigh comparison's run is the run its settings give on their own.
    alone = tmp_path / "alone"
    small = {"num-server-rounds": 2, "seed": 0, "num-devices": 4, "channel.model": RAYLEIGH}
    run_inprocess(run_settings(alone, **small))
    assert comparable(runs["RayleighChannel"]) == comparable(alone)


def test_the_default_folder_name_says_which_channel_ran():
    assert run_folder_name({"policy": "bc"}) == "bc"
    assert run_folder_name({"policy": "bc", "channel.model": "tr38901"}) == "bc_channel=tr38901"
    assert run_folder_name({"policy": "bc", "channel.model": RAYLEIGH}) == (
        "bc_channel=RayleighChannel"
    )


MINE = """
class NoDraw:
    def __init__(self, rng):
        self.rng = rng


class NeedsAntenna:
    def __init__(self, antennas: int, rng):
        self.rng = rng

    def draw_round(self, model_bits):
        raise AssertionError("never drawn")


class Broken:
    def __init__(self, num_devices: int, deadline_s: float):
        if deadline_s < 1.0:
            raise RuntimeError(f"deadline {deadline_s} s is too short for {num_devices}")

    def draw_round(self, model_bits):
        raise AssertionError("never drawn")


class OneTooMany:
    def __init__(self, num_devices):
        self.num_devices = num_devices

    def draw_round(self, model_bits):
        import numpy as np

        from channel import RoundDraw

        n = self.num_devices + 1
        return RoundDraw(np.ones(n, bool), np.ones(n), np.full(n, 1e5))
"""


@pytest.mark.parametrize(
    ("settings", "phrase"),
    [
        ({"channel.model": "trace"}, "'channel.model' = 'trace' replays run-config key "
                                     "'channel.trace', which is empty"),
        ({"channel.trace": "/tmp/cell.npz"}, "'channel.trace' = '/tmp/cell.npz' is replayed only "
                                             "with channel.model = 'trace' (got 'paper')"),
        ({"channel.model": "umi"}, "'channel.model' must be one of \"paper\", \"tr38901\", "
                                   "\"trace\" or a class"),
        ({"channel.model": "{mine}:NoDraw"}, "allowed: a class with draw_round(model_bits)"),
        ({"channel.model": "{mine}:NeedsAntenna"}, "NeedsAntenna() needs 'antennas', which no "
                                                   "setting gives; allowed parameters: rng, cell"),
        ({"channel.model": "{mine}:Broken"}, "Broken() raised RuntimeError: deadline 0.012 s is "
                                             "too short for 6 (mine.py:17 in __init__)"),
    ],
)  # fmt: skip
def test_a_bad_channel_is_refused_in_one_line_before_the_start(tmp_path, capsys, settings, phrase):
    mine = tmp_path / "mine.py"
    mine.write_text(textwrap.dedent(MINE).lstrip("\n"))
    given = {k: v.replace("{mine}", str(mine)) for k, v in settings.items()}
    run_config = {"num-devices": 6, "num-server-rounds": 2, **given}
    line = refused_before_start(capsys, run_config, tmp_path / "out")
    assert phrase in line, line


def test_a_channel_drawing_another_number_of_devices_fails_the_run_in_one_line(tmp_path, capsys):
    mine = tmp_path / "mine.py"
    mine.write_text(textwrap.dedent(MINE).lstrip("\n"))
    run_config = {"num-devices": 6, "num-server-rounds": 2, "channel.model": f"{mine}:OneTooMany"}
    code = invoke(
        ["inprocess", "--run-config", format_run_config(run_config), "--out", str(tmp_path / "out")]
    )
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err, err
    assert (
        "failed: round 1: channel OneTooMany.draw_round (mine.py) drew 7 devices; the run has "
        "num-devices = 6 (one entry per device)"
    ) in err, err
