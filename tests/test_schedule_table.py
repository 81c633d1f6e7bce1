"""experiments.paper.schedule_table: Table II's scheduled number and WEMD without training."""

from __future__ import annotations

import math
import zlib
from pathlib import Path

import numpy as np
import pytest
from fake_runs import read_csv

from experiments.cli import invoke
from experiments.paper import schedule_table
from experiments.paper.schedule_table import (
    TABLE_COLUMNS,
    TABLE_POLICIES,
    PolicySpec,
    TableSettings,
    choose_poc_candidates,
    policy_stream_word,
    simulate,
    simulate_rounds,
)
from fedcgd_strategy.policies import PolicyContext, RoundInputs, make_policy

#: Table II of the paper (CIFAR-10, l = 1, r = 1, tau = 1), typed in from the LaTeX source.
PAPER = {
    "fedcgd-fscd": (10.20, 0.306), "fedcgd-gs": (10.01, 0.311), "fedcgd-fscd-gc": (10.10, 0.310),
    "fedcbs": (17.34, 0.536), "poc": (13.71, 0.621), "bn2": (17.39, 0.537), "bc": (17.67, 0.527),
}  # fmt: skip

#: A small cell whose 5 MHz budget binds (about 10 of 16 devices available each round).
TINY = TableSettings(
    drops=2, rounds=4, num_devices=16, availability_prob=0.6, total_bandwidth_hz=5e6,
    poc_candidates=3,
)  # fmt: skip
ALL_SPECS = [PolicySpec(p, p, 3 if p == "poc" else 0) for p in TABLE_POLICIES]


def test_every_policy_respects_the_budget_in_every_round():
    binding = 0
    for res in simulate_rounds(TINY, ALL_SPECS):
        need = res.inputs.min_bandwidth_hz
        feasible = res.inputs.candidate & np.isfinite(need)
        binding += int(need[feasible].sum() > TINY.total_bandwidth_hz)
        for label, decision in res.decisions.items():
            chosen = decision.selected
            assert not np.any(chosen & ~res.inputs.candidate), label
            assert np.all(np.isfinite(need[chosen])), label
            assert need[chosen].sum() <= TINY.total_bandwidth_hz * (1 + 1e-9), label
            if label == "poc":
                assert chosen.sum() <= 3
            if chosen.any():
                mean = res.inputs.label_dist[chosen].mean(axis=0)
                assert decision.wemd == pytest.approx(np.abs(mean - 0.1).sum())
            else:
                assert math.isnan(decision.wemd)
        # BC: a walk by gain, passing over the infeasible, until the budget stops it
        order = sorted(np.flatnonzero(res.inputs.candidate), key=lambda v: -res.inputs.gain_lin[v])
        used, count = 0.0, 0
        for v in (v for v in order if math.isfinite(need[v])):
            if used + need[v] > TINY.total_bandwidth_hz:
                break
            used, count = used + need[v], count + 1
        assert int(res.decisions["bc"].selected.sum()) == count
    assert binding > 0, "the budget never binds: the test would prove nothing"


def test_bc_count_on_a_hand_instance():
    inf = np.inf
    inputs = RoundInputs(
        candidate=np.array([True, True, True, True, True, False]),
        label_dist=np.tile(np.eye(2)[0], (6, 1)), num_examples=np.ones(6), sigma_v=np.ones(6),
        min_bandwidth_hz=np.array([3e6, inf, 4e6, 2e6, 1e6, 0.0]),
        gain_lin=np.array([5.0, 4.0, 3.0, 2.0, 1.0, 9.0]), total_bandwidth_hz=8e6,
        batch_size=32, target_dist=np.array([0.5, 0.5]),
    )  # fmt: skip
    rng = np.random.default_rng(0)
    # By gain: device 0 (3 MHz, used 3), 1 infeasible (passed over), 2 (4 MHz, used 7),
    # 3 needs 2 MHz > 1 MHz left: stop. Device 5 is the best but not a candidate.
    stop = make_policy("bc", PolicyContext(num_devices=6, num_classes=2)).schedule(inputs, rng)
    assert stop.selected.tolist() == [True, False, True, False, False, False]
    skip = make_policy("bc", PolicyContext(num_devices=6, num_classes=2, pack_rule="skip"))
    assert skip.schedule(inputs, rng).selected.sum() == 3  # + device 4 (1 MHz, used 8)


@pytest.mark.parametrize("mode", ["batch", "local"])
def test_round_label_dist_comes_from_the_device_shard(mode):
    settings = TableSettings(drops=1, rounds=2, label_dist=mode)
    for res in simulate_rounds(settings, [PolicySpec("bc", "bc")]):
        inputs = res.inputs
        assert inputs.local_dist is not None
        for v in np.flatnonzero(inputs.candidate):
            local, p_v = inputs.local_dist[v], inputs.label_dist[v]
            assert inputs.num_examples[v] == 781  # 50,000 labels in 64 shards of 781
            assert np.count_nonzero(local) <= 2  # l = 1: one shard, at most two classes
            if mode == "local":
                np.testing.assert_allclose(p_v, local)
            else:
                counts = p_v * 32
                np.testing.assert_allclose(counts, np.round(counts), atol=1e-9)
                assert counts.sum() == pytest.approx(32)
                assert np.all((p_v > 0) <= (local > 0))


def test_poc_chooser_picks_the_nearest_mean():
    v = list(range(1, 11))
    means = [1.3 * x for x in v]  # 6.5 at V' = 5 is nearest 7.0 (7.8 at V' = 6)
    assert choose_poc_candidates(v, means, target=7.0) == 5
    assert choose_poc_candidates([1, 2, 3], [1.0, 3.0, 9.0], target=2.0) == 1  # tie: smaller
    assert choose_poc_candidates([4, 9], [float("nan"), 20.0], target=5.0) == 9
    with pytest.raises(ValueError):
        choose_poc_candidates([], [])


def test_a_policy_stream_depends_on_its_name_only(monkeypatch):
    """A policy added to the registry (here at the front) leaves POC's and Fed-CBS's draws
    (and the same settings give the same rounds)."""
    specs = [PolicySpec("poc", "poc", 3), PolicySpec("fedcbs", "fedcbs")]
    before = simulate(TINY, specs)
    names = ("my-policy", *schedule_table.POLICY_NAMES)
    monkeypatch.setattr(schedule_table, "POLICY_NAMES", names)
    after = simulate(TINY, list(reversed(specs)))
    for label in ("poc", "fedcbs"):
        assert after[label].scheduled == before[label].scheduled
        assert after[label].wemd == before[label].wemd
    assert policy_stream_word("poc") == zlib.crc32(b"poc")
    assert policy_stream_word("poc") != policy_stream_word("fedcbs")


def test_cli_fits_poc_and_writes_the_table_and_its_progress_as_plain_lines(tmp_path: Path, capsys):
    argv = "paper schedule-table --drops 2 --rounds 2 --fit-poc --fit-max 4 --out".split()
    assert invoke([*argv, str(tmp_path)]) == 0
    # stderr is not a terminal here (as in a log file): whole lines, no carriage return and no
    # escape code; the last says every drop is done
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err, repr(err)
    assert err.endswith("\n") and err.splitlines()[-1].startswith("table: drop 2/2 ("), repr(err)
    rows = read_csv(tmp_path / "table.csv")
    assert list(rows[0]) == list(TABLE_COLUMNS)  # the header, in order
    assert [r["policy"] for r in rows] == list(TABLE_POLICIES)
    for row in rows:
        assert 0 < float(row["mean_scheduled"]) <= 64
        assert 0 <= float(row["mean_wemd"]) <= 2
        assert float(row["scheduled_ci95"]) >= 0
        paper = PAPER[row["policy"]]
        assert (float(row["paper_scheduled"]), float(row["paper_wemd"])) == paper
    fit = read_csv(tmp_path / "poc_fit.csv")
    assert [int(r["poc_candidates"]) for r in fit] == [1, 2, 3, 4]
    for r in fit:
        assert 0 <= float(r["mean_scheduled"]) <= int(r["poc_candidates"])
    nearest = min(fit, key=lambda r: abs(float(r["mean_scheduled"]) - 13.71))
    (poc,) = [r for r in rows if r["policy"] == "poc"]
    assert poc["poc_candidates"] == nearest["poc_candidates"]
    assert float(poc["mean_scheduled"]) == pytest.approx(float(nearest["mean_scheduled"]))
    assert all((tmp_path / f).stat().st_size > 0 for f in ("table.png", "poc_fit.png"))
