"""Recorded channels (``channel.trace``): format, B* of a replayed round, runs and resumes.

The engine and the launcher are imported inside the tests, so that the pure tests of
``channel.trace`` run on their own.
"""

from __future__ import annotations

import io
import json
import math
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from run_results import lines, same_model
from subprocesses import FEDCGD, run_ok
from task_settings import refused_before_start
from test_channel_bandwidth import reference_min_bandwidth_hz

from channel import Cell, CellConfig, ChannelTrace, TraceError, TraceReplay
from channel.trace import load_trace, record_cell_trace, write_trace

PROJECT = Path(__file__).resolve().parents[1]

# Radio of the hand-computed test: S = 23 dBm, N0 = -174 dBm/Hz + 6 dB, D_w = 1e5 bit, d = 10 ms.
TX_POWER_W = 10.0 ** ((23.0 - 30.0) / 10.0)  # 0.19953 W
NOISE_PSD_W_PER_HZ = 10.0 ** ((-174.0 + 6.0 - 30.0) / 10.0)  # 1.5849e-20 W/Hz
MODEL_BITS = 1.0e5
DEADLINE_S = 0.01  # D_w / d = 1e7 bit/s


def oracle_min_bandwidth_hz(gain_lin: float) -> float:
    """B* solving B log2(1 + S H / (B N0)) = D_w / d by bisection (inf when no B reaches it)."""
    return reference_min_bandwidth_hz(
        MODEL_BITS, DEADLINE_S, TX_POWER_W, gain_lin, NOISE_PSD_W_PER_HZ
    )


def hand_config(num_devices: int = 2) -> CellConfig:
    return CellConfig(
        num_devices=num_devices, tx_power_dbm=23.0, noise_psd_dbm_per_hz=-174.0,
        noise_figure_db=6.0, deadline_s=DEADLINE_S,
    )  # fmt: skip


def test_replay_b_star_is_the_lambert_w_root_starts_at_its_round_and_repeats_a_cell(tmp_path):
    # Row 0: device 0 available (H = 1e-10), device 1 unavailable with no gain (0).
    # Row 1: device 0 available but too far (H = 1e-14: S H / (N0 ln 2) = 1.8e5 < 1e7 bit/s),
    #        device 1 unavailable with H = 2e-9 (B* computed all the same, as the Cell does).
    available = np.array([[True, False], [True, False]])
    gain_lin = np.array([[1e-10, 0.0], [1e-14, 2e-9]])
    path = tmp_path / "hand.npz"
    write_trace(path, available, gain_lin)
    replay = TraceReplay(load_trace(path), hand_config())
    first, second = replay.draw_round(MODEL_BITS), replay.draw_round(MODEL_BITS)

    np.testing.assert_array_equal(first.available, [True, False])
    np.testing.assert_array_equal(second.available, [True, False])
    np.testing.assert_array_equal(first.gain_lin, [1e-10, 0.0])
    # Hand check of the oracle for row 0, device 0: S H / N0 = 1.2589e9 Hz.
    assert TX_POWER_W * 1e-10 / NOISE_PSD_W_PER_HZ == pytest.approx(1.2589254e9, rel=1e-6)
    assert first.min_bandwidth_hz[0] == pytest.approx(oracle_min_bandwidth_hz(1e-10), rel=1e-9)
    assert 0.0 < first.min_bandwidth_hz[0] < 2e6  # about 1.9 MHz for 10 Mbit/s
    assert first.min_bandwidth_hz[1] == math.inf  # no gain, no rate
    assert second.min_bandwidth_hz[0] == math.inf
    assert second.min_bandwidth_hz[1] == pytest.approx(oracle_min_bandwidth_hz(2e-9), rel=1e-9)
    assert first.los is None and first.distance_2d_m is None  # a trace holds no geometry
    with pytest.raises(ValueError, match="2 rounds; round 3"):
        replay.draw_round(MODEL_BITS)
    # a replay from round 3 (two rounds already run)
    available = np.array([[True, False, False], [False, True, False], [False, False, True]])
    trace = ChannelTrace(available=available, gain_lin=np.full((3, 3), 1e-10))
    replay = TraceReplay(trace, hand_config(3), first_round=2)
    np.testing.assert_array_equal(replay.draw_round(MODEL_BITS).available, [False, False, True])
    with pytest.raises(ValueError, match="3 rounds; round 4"):  # the last row was replayed
        replay.draw_round(MODEL_BITS)
    TraceReplay(trace, hand_config(3), first_round=3)  # a finished run: nothing left to draw
    # a recorded cell replays the cell bit for bit
    config = CellConfig(num_devices=12, availability_prob=0.6)
    path = tmp_path / "cell.npz"
    trace = record_cell_trace(path, Cell(config, np.random.default_rng(5)), 4)
    assert (trace.num_rounds, trace.num_devices) == (4, 12)
    cell = Cell(config, np.random.default_rng(5))
    replay = TraceReplay(load_trace(path), config)
    for _ in range(4):
        drawn, replayed = cell.draw_round(4810 * 32), replay.draw_round(4810 * 32)
        for name in ("available", "gain_lin", "min_bandwidth_hz"):
            np.testing.assert_array_equal(getattr(replayed, name), getattr(drawn, name))
    assert np.isfinite(trace.gain_lin).all() and (trace.gain_lin > 0).all()


def test_write_trace_writes_exactly_the_path_and_a_write_cut_short_keeps_the_old(
    tmp_path, monkeypatch
):
    path = tmp_path / "no-suffix"
    write_trace(path, np.ones((2, 3), dtype=bool), np.full((2, 3), 1e-9, dtype=np.float32))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-suffix"]
    with np.load(path) as archive:
        assert sorted(archive.files) == ["available", "gain_lin"]
        assert archive["available"].dtype == np.bool_ and archive["gain_lin"].dtype == np.float64
    trace = load_trace(path)
    assert trace.gain_lin[1, 2] == np.float64(np.float32(1e-9))
    with pytest.raises(ValueError):  # read-only: a replay cannot change the file's rounds
        trace.gain_lin[0, 0] = 1.0
    # a write cut short keeps the earlier trace
    path = tmp_path / "trace.npz"
    write_trace(path, np.ones((1, 2), dtype=bool), np.full((1, 2), 2.0))

    def cut_short(out, **arrays):
        out.write(b"PK\x03\x04 half an archive")
        raise OSError("No space left on device")

    monkeypatch.setattr(np, "savez", cut_short)
    with pytest.raises(OSError, match="No space"):
        write_trace(path, np.ones((1, 2), dtype=bool), np.full((1, 2), 3.0))
    assert load_trace(path).gain_lin.tolist() == [[2.0, 2.0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["no-suffix", "trace.npz"]


@pytest.mark.parametrize(
    ("available", "gain_lin", "message"),
    [  # and the refusals of BAD below, which read the same rules from files
        (np.ones((2, 2), dtype=bool), np.ones((2, 2), dtype=np.int64), "gain_lin has dtype"),
        (np.ones((0, 2), dtype=bool), np.ones((0, 2)), "R >= 1"),
        (np.ones((2, 2), dtype=bool), np.ones((2, 3)), r"\(2, 3\), available \(2, 2\)"),
        (np.ones((2, 2), dtype=bool), np.array([[1.0, np.inf], [1.0, 1.0]]), r"\[0, 1\] = inf"),
    ],
)
def test_bad_arrays_are_refused_and_nothing_is_written(tmp_path, available, gain_lin, message):
    with pytest.raises(TraceError, match=message):
        write_trace(tmp_path / "bad.npz", available, gain_lin)
    assert list(tmp_path.iterdir()) == []


def run_settings(result_dir: Path, **changes: Any) -> dict[str, Any]:
    from experiments.run.run_config import validated_run_config, with_resolved_data_dir

    overrides = {"num-devices": 6, "num-server-rounds": 3, "result-dir": str(result_dir)}
    return with_resolved_data_dir(validated_run_config({**overrides, **changes}))


def record_run_trace(path: Path, settings: dict[str, Any], num_rounds: int) -> ChannelTrace:
    """The trace the run with ``settings`` simulates: its cell seeded as train_rounds seeds it."""
    from server_app.config import parse_run_config

    config = parse_run_config(settings)
    cell_seed, _policy_seed = np.random.SeedSequence(config.seed).spawn(2)
    return record_cell_trace(path, Cell(config.cell, np.random.default_rng(cell_seed)), num_rounds)


def channel_columns(result_dir: Path) -> list[tuple[Any, ...]]:
    keep = ("round", "num_available", "num_feasible", "scheduled", "bandwidth_used_hz", "wemd")
    return [tuple(line[k] for k in keep) for line in lines(result_dir)]


@pytest.fixture
def outside(tmp_path_factory) -> Path:
    """A folder outside the project (the trace must be an absolute path anywhere)."""
    folder = tmp_path_factory.mktemp("trace")
    assert PROJECT not in folder.parents
    return folder


@pytest.mark.parametrize("policy", ["fedcgd-fscd", "bc"])
def test_a_run_on_the_recorded_cell_equals_the_simulated_run(outside, policy):
    from experiments.run.inprocess import run_inprocess

    trace_path = outside / "cell.npz"
    simulated = outside / "simulated"
    record_run_trace(trace_path, run_settings(simulated, policy=policy), 3)
    replayed = outside / "replayed"
    run_inprocess(run_settings(simulated, policy=policy))
    trace = {"channel.model": "trace", "channel.trace": str(trace_path)}
    run_inprocess(run_settings(replayed, policy=policy, **trace))

    assert channel_columns(replayed) == channel_columns(simulated)
    assert sum(line["num_scheduled"] for line in lines(simulated)) > 0
    assert same_model(replayed, simulated)
    recorded = json.loads((replayed / "config.json").read_text())
    assert recorded["channel_trace"] == str(trace_path)


def test_a_resumed_trace_run_continues_at_the_checkpoint_round_if_the_trace_covers_it(
    capsys, outside
):
    from experiments.cli import invoke
    from experiments.run.inprocess import run_inprocess
    from experiments.run.run_config import format_run_config

    # Rounds 1-2: only devices 0-2 are available; rounds 3-4: only devices 3-5. A resumed run
    # that replayed from the first row again would schedule devices 0-2 in round 3.
    available = np.zeros((4, 6), dtype=bool)
    available[:2, :3] = True
    available[2:, 3:] = True
    gain_lin = np.tile(10.0 ** -np.linspace(10.0, 11.0, 6), (4, 1))  # all feasible, unequal
    trace_path = outside / "halves.npz"
    write_trace(trace_path, available, gain_lin)
    settings = {"channel.trace": str(trace_path), "checkpoint-every": 1, "policy": "bc"}
    settings["channel.model"] = "trace"

    whole = outside / "whole"
    run_inprocess(run_settings(whole, **settings, **{"num-server-rounds": 4}))
    part = outside / "part"
    run_inprocess(run_settings(part, **settings, **{"num-server-rounds": 2}))
    assert [line["round"] for line in lines(part)] == [1, 2]
    more = {**settings, "num-devices": 6, "num-server-rounds": 5, "resume-from": str(part)}
    assert invoke(["inprocess", "--run-config", format_run_config(more)]) == 2  # 4 rows
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "'channel.trace'" in line and "must be >= num-server-rounds = 5" in line
    run_inprocess(
        run_settings(part, **settings, **{"num-server-rounds": 4, "resume-from": str(part)})
    )

    assert channel_columns(part) == channel_columns(whole)
    assert same_model(part, whole)
    for line in lines(whole):
        rows = set(range(3)) if line["round"] <= 2 else set(range(3, 6))
        assert line["scheduled"] and set(line["scheduled"]) <= rows, line


def good_trace(path: Path, rounds: int = 3, devices: int = 6) -> Path:
    write_trace(path, np.ones((rounds, devices), dtype=bool), np.full((rounds, devices), 1e-10))
    return path


def header_only(trace: Path, shape: tuple[int, int]) -> None:
    """An .npz whose two arrays declare ``shape`` in their headers but hold no data."""
    with zipfile.ZipFile(trace, "w") as archive:
        for name, descr in (("available", "|b1"), ("gain_lin", "<f8")):
            member = io.BytesIO()
            header = {"descr": descr, "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(member, header)
            archive.writestr(f"{name}.npy", member.getvalue())


def savez(**arrays: np.ndarray) -> Callable[[Path], None]:
    return lambda path: np.savez(path, **arrays)


def gains(at: tuple[int, int] = (0, 0), value: float = 1e-10) -> np.ndarray:
    """Feasible gains of 3 rounds x 6 devices, ``value`` at ``at``."""
    out = np.full((3, 6), 1e-10)
    out[at] = value
    return out


def npy(path: Path) -> None:
    with open(path, "wb") as handle:
        np.save(handle, gains())


ONES = np.ones((3, 6), dtype=bool)
#: kind -> (what makes the file at its path; None: the value is the relative "trace.npz", a
#: phrase the one-line error must contain)
BAD: dict[str, tuple[Callable[[Path], object] | None, str]] = {
    # 10^7 x 10^7 declared in a file of a few hundred bytes; 20,000 x 20,000 (3.6 GB) with the
    # data absent; V = 7 declared, data truncated: each refused unread
    "huge-header": (lambda t: header_only(t, (10**7, 10**7)), "more than 536870912 bytes"),
    "inflating": (lambda t: header_only(t, (20_000, 20_000)), "(3600000000 bytes once read)"),
    "other-devices-unread": (lambda t: header_only(t, (3, 7)), "V = 7 devices"),
    "relative": (None, "must be an absolute path"),
    "missing": (lambda t: None, "no such file"),
    "folder": (Path.mkdir, "is not a file"),
    "text": (lambda t: t.write_text("available,gain_lin\n1,1e-10\n"), "is not an .npz archive"),
    "npy": (npy, "single .npy array"),
    "extra-array": (savez(available=ONES, gain_lin=gains(), los=ONES),
                    "['available', 'gain_lin', 'los']"),
    "missing-array": (savez(available=ONES), "holds the arrays ['available']"),
    "object-array": (savez(available=ONES, gain_lin=gains().astype(object)),
                     "holds Python objects"),
    "int-available": (savez(available=ONES.astype(np.int8), gain_lin=gains()),
                      "available has dtype int8; must be bool"),
    "one-dimensional": (savez(available=ONES[0], gain_lin=gains()[0]),
                        "shape (6,); must be 2-D [R, V]"),
    "nan-gain": (savez(available=ONES, gain_lin=gains((2, 4), np.nan)), "gain_lin[2, 4] = nan"),
    "negative-gain": (savez(available=ONES, gain_lin=gains((0, 1), -1e-12)),
                      "must be finite and >= 0"),
    "other-devices": (lambda t: good_trace(t, devices=5),
                      "V = 5 devices (columns of available and gain_lin); must equal num-devi"),
    "too-few-rounds": (lambda t: good_trace(t, rounds=2),
                       "R = 2 rounds (rows); must be >= num-server-rounds = 3"),
}  # fmt: skip


@pytest.mark.parametrize("kind", BAD)
def test_a_bad_trace_is_refused_in_one_line_before_the_start(capsys, outside, kind):
    make, phrase = BAD[kind]
    value = "trace.npz" if make is None else str(outside / f"{kind}.npz")
    if make is not None:
        make(outside / f"{kind}.npz")
    out = outside / "out"
    settings = {"num-devices": 6, "num-server-rounds": 3, "result-dir": str(out)}
    settings |= {"channel.model": "trace", "channel.trace": value}
    line = refused_before_start(capsys, settings, out)
    assert line.startswith("error: run-config key 'channel.trace' = "), line
    assert repr(value) in line or f"'{value}'" in line, line
    assert phrase in line, line


@pytest.mark.slow
def test_a_trace_through_the_launcher_gives_the_simulated_schedules(outside):
    """``make run RUN_CONFIG="channel.trace='...'"``: flwr run on its own SuperLink."""
    from experiments.run.inprocess import run_inprocess
    from experiments.run.run_config import format_run_config

    small = {"num-devices": 3, "num-server-rounds": 2, "channel.availability-prob": 0.9}
    simulated = outside / "simulated"
    trace_path = outside / "cell.npz"
    record_run_trace(trace_path, run_settings(simulated, **small), 2)
    run_inprocess(run_settings(simulated, **small))

    launched = outside / "launched"
    run_config = {**small, "channel.model": "trace", "channel.trace": str(trace_path)}
    run_config["result-dir"] = str(launched)
    run_ok([FEDCGD, "run", "--run-config", format_run_config(run_config)], timeout=900)
    status = json.loads((launched / "status.json").read_text())
    assert status["state"] == "completed", status
    assert [line["round"] for line in lines(launched)] == [1, 2]
    assert channel_columns(launched) == channel_columns(simulated)
