"""Each run's TensorBoard events, read back with TensorBoard's own reader."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from run_results import lines as lines_of
from task_settings import checkpointed_run_config
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from experiments.run.inprocess import run_inprocess
from experiments.run.launcher import results_line
from server_app.recorder import SCALARS

SMALL = {"num-devices": 6, "channel.availability-prob": 0.8}


def scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar TensorBoard shows for ``folder``: tag -> [(step, value)]."""
    events = EventAccumulator(str(folder))
    events.Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def expected(lines: list[dict]) -> dict[str, list[tuple[int, float]]]:
    """The metrics lines' finite numbers by tag (the oracle: metrics.jsonl itself)."""
    by_tag = {tag: [(x["round"], float(x[f])) for x in lines if isinstance(x.get(f), int | float)]
              for tag, f in SCALARS.items()}  # fmt: skip
    return {tag: points for tag, points in by_tag.items() if points}


def assert_same(shown: dict, wanted: dict) -> None:
    assert set(shown) == set(wanted)
    for tag, points in wanted.items():
        assert [step for step, _ in shown[tag]] == [step for step, _ in points], tag
        for (_, value), (_, want) in zip(shown[tag], points, strict=True):
            assert value == pytest.approx(want, rel=2**-23, abs=1e-37), tag  # stored as float32


def test_a_resumed_run_shows_each_round_once(tmp_path: Path) -> None:
    """Killed after round 3 with its checkpoint of round 2: the resume replaces round 3.

    TensorBoard reads a folder's event files in name order; names sort by the second they were
    made in, then by a per-process counter as text (…pid.9 after …pid.11): the resumed run's
    events must not depend on it.
    """
    killed, short = tmp_path / "killed", tmp_path / "short"
    run_inprocess(checkpointed_run_config(killed, **SMALL, **{"num-server-rounds": 3}))
    run_inprocess(checkpointed_run_config(short, **SMALL, **{"num-server-rounds": 2}))
    shutil.copy(short / "checkpoint.pt", killed / "checkpoint.pt")  # as if killed after 3
    resumed = {**SMALL, "num-server-rounds": 4, "resume-from": str(killed)}
    run_inprocess(checkpointed_run_config(killed, **resumed))
    lines = lines_of(killed)
    assert [line["round"] for line in lines] == [1, 2, 3, 4]
    assert len(list(killed.glob("events.out.tfevents.*"))) == 1  # the stopped part's went
    assert_same(scalars(killed), expected(lines))


def hparams(folder: Path) -> dict[str, object]:
    """The run's settings as TensorBoard's HParams view reads them."""
    events = EventAccumulator(str(folder))
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(
        content["_hparams_/session_start_info"]
    ).session_start_info.hparams
    return {k: v.WhichOneof("kind") and getattr(v, v.WhichOneof("kind")) for k, v in start.items()}


def test_every_round_shows_its_metrics_line_and_the_run_its_settings_as_hparams(
    tmp_path: Path,
) -> None:
    """Policy, aggregator and seed always; then only settings that change what a run computes
    and differ from their defaults (no folders, timeouts or device), by run-config key; each
    policy and aggregator parameter by its own key (``window = 10`` is told from ``20``)."""
    folder = tmp_path / "run"
    policy = f"{Path('examples/proportional_fair.py').resolve()}:ProportionalFair"
    chosen = {
        "policy": policy, "policy-params": "{window = 10}", "aggregator": "FedTrimmedAvg",
        "aggregator-params": "{beta = 0.25}", "local-steps": 3, "seed": 7, "num-server-rounds": 2,
    }  # fmt: skip
    run_inprocess(checkpointed_run_config(folder, **SMALL, **chosen))
    shown = scalars(folder)
    assert {"accuracy", "loss", "schedule/wemd", "devices/scheduled"} <= set(shown)
    assert_same(shown, expected(lines_of(folder)))
    # not result-dir, checkpoint-every (where and how), nor learning-rate (its default)
    assert hparams(folder) == {
        "policy": policy, "aggregator": "FedTrimmedAvg", "seed": 7.0, "num-server-rounds": 2.0,
        "num-devices": 6.0, "local-steps": 3.0, "channel.availability-prob": 0.8,
        "policy-params.window": 10.0, "aggregator-params.beta": 0.25,
        "protocol": "channel",  # "auto" resolved: the policy needs no query (FedCGD: "query")
    }  # fmt: skip


def test_the_results_line_names_the_event_files_and_the_command_that_shows_them(tmp_path):
    folder = tmp_path / "a run"
    folder.mkdir()
    (folder / "metrics.jsonl").write_text("")
    assert results_line(folder) == f"Results: {folder} (metrics.jsonl)"
    (folder / "events.out.tfevents.1.host").write_bytes(b"")
    assert results_line(folder) == (
        f"Results: {folder} (metrics.jsonl, events.out.tfevents.*; tensorboard --logdir '{folder}')"
    )
