"""Cell: config validation, device drop, per-round draws (KS tests, binomial bounds), seeding;
the channel report (run_report files and numbers, and the command line)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

import channel
from channel import Cell, CellConfig, RoundDraw, count_fit_cheapest_first
from channel.report import PAPER_CIFAR10_MODEL_BITS, run_report
from experiments.cli import invoke

MODEL_BITS = PAPER_CIFAR10_MODEL_BITS
KS_MIN_P_VALUE = 1e-3


def shadowing_db(cell: Cell, draw: RoundDraw) -> np.ndarray:
    """Recover the shadow fading X = -10 log10(H) - PL(d2D, LOS) of every device."""
    return -10.0 * np.log10(draw.gain_lin) - cell.config.pathloss_db(draw.distance_2d_m, draw.los)


def test_default_config_is_table_i_and_tr38901_needs_heights_above_one_metre() -> None:
    config = CellConfig()
    assert (config.num_devices, config.radius_m, config.min_distance_m) == (64, 250.0, 10.0)
    assert (config.h_bs_m, config.h_ut_m, config.carrier_frequency_hz) == (10.0, 1.5, 3.5e9)
    assert (config.pathloss_model, config.availability_prob) == ("paper", 0.3)
    assert (config.tx_power_dbm, config.noise_psd_dbm_per_hz) == (23.0, -174.0)
    assert (config.noise_figure_db, config.total_bandwidth_hz) == (6.0, 20e6)
    assert config.deadline_s == 2.0
    assert config.redraw_los_each_round and config.redraw_shadowing_each_round
    # 10^((23 - 30)/10) = 0.19952623149688797 W; 10^((-174 + 6 - 30)/10) = 1.5848931924611108e-20
    assert config.tx_power_w == pytest.approx(0.19952623149688797, rel=1e-12)
    assert config.noise_psd_w_per_hz == pytest.approx(1.5848931924611108e-20, rel=1e-12)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.radius_m = 100.0  # type: ignore[misc]
    integers = CellConfig(radius_m=300, total_bandwidth_hz=10_000_000, deadline_s=1)
    assert isinstance(integers.radius_m, float) and integers.radius_m == 300.0
    assert isinstance(integers.deadline_s, float)
    with pytest.raises(ValueError, match=r"CellConfig\.h_ut_m = 1\.0 .*tr38901"):
        CellConfig(pathloss_model="tr38901", h_ut_m=1.0)  # heights above 1 m: its breakpoint
    CellConfig(pathloss_model="paper", h_ut_m=1.0)  # fine without a breakpoint


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("num_devices", 0),
        ("num_devices", 2.5),
        ("num_devices", True),
        ("radius_m", 10.0),  # not above min_distance_m
        ("pathloss_model", "umi"),
        # the schema's checks (every bound: test_schema), named as the field
        ("carrier_frequency_hz", math.nan),
        ("noise_psd_dbm_per_hz", "loud"),
        ("redraw_los_each_round", 1),
    ],
)
def test_config_errors_name_field_and_value(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"CellConfig\.{field}\b") as info:
        CellConfig(**{field: value})  # type: ignore[arg-type]
    assert repr(value) in str(info.value) or str(value) in str(info.value)
    assert "must be" in str(info.value)


def test_device_radii_uniform_over_annulus_area() -> None:
    config = CellConfig(num_devices=20_000)
    cell = Cell(config, np.random.default_rng(1))
    r0, radius = config.min_distance_m, config.radius_m
    assert np.all((cell.distance_2d_m >= r0) & (cell.distance_2d_m <= radius))

    def area_cdf(r: np.ndarray) -> np.ndarray:
        # P(d <= r) = (r^2 - r0^2) / (R^2 - r0^2) for a drop uniform over the annulus area.
        return np.clip((r**2 - r0**2) / (radius**2 - r0**2), 0.0, 1.0)

    assert stats.kstest(cell.distance_2d_m, area_cdf).pvalue > KS_MIN_P_VALUE
    # A drop uniform in radius would fail this test.
    uniform_radius = np.random.default_rng(2).uniform(r0, radius, 20_000)
    assert stats.kstest(uniform_radius, area_cdf).pvalue < KS_MIN_P_VALUE
    angles = stats.uniform(loc=0.0, scale=2.0 * np.pi).cdf
    assert stats.kstest(cell.angle_rad, angles).pvalue > KS_MIN_P_VALUE


@pytest.mark.parametrize(("model", "nlos_std_db"), [("paper", 8.2), ("tr38901", 7.82)])
def test_shadowing_is_gaussian_with_the_state_std(model: str, nlos_std_db: float) -> None:
    cell = Cell(CellConfig(num_devices=4_000, pathloss_model=model), np.random.default_rng(5))
    draws = [cell.draw_round(MODEL_BITS) for _ in range(5)]
    shadow = np.concatenate([shadowing_db(cell, draw) for draw in draws])
    los = np.concatenate([draw.los for draw in draws])
    for state, std_db in ((True, 4.0), (False, nlos_std_db)):
        sample = shadow[los == state]
        assert sample.size > 2_000
        assert stats.kstest(sample, stats.norm(scale=std_db).cdf).pvalue > KS_MIN_P_VALUE
        # Sample std within 4 standard errors (std error of s is about sigma / sqrt(2 n)).
        assert np.std(sample) == pytest.approx(std_db, rel=4.0 / math.sqrt(2 * sample.size))


@pytest.mark.parametrize("p_a", [0.0, 0.3, 1.0])
def test_availability_frequency_within_binomial_bound(p_a: float) -> None:
    rounds = 400  # p_a = 0 or 1: the bound is 0, every draw the same
    cell = Cell(CellConfig(availability_prob=p_a), np.random.default_rng(7))
    count = sum(int(cell.draw_round(MODEL_BITS).available.sum()) for _ in range(rounds))
    trials = rounds * cell.num_devices
    assert abs(count - trials * p_a) <= 5.0 * math.sqrt(trials * p_a * (1.0 - p_a))


def test_los_states_follow_los_probability() -> None:
    cell = Cell(CellConfig(num_devices=2_000), np.random.default_rng(9))
    rounds = 20
    los_counts = np.sum([cell.draw_round(MODEL_BITS).los for _ in range(rounds)], axis=0)
    probability = channel.los_probability(cell.distance_2d_m)
    # Sum of independent Bernoullis: mean sum p, variance sum p (1 - p).
    expected = rounds * probability.sum()
    std = math.sqrt(rounds * float(np.sum(probability * (1.0 - probability))))
    assert abs(los_counts.sum() - expected) <= 5.0 * std
    assert np.all(los_counts[cell.distance_2d_m <= 18.0] == rounds)


def test_same_seed_same_draws_other_seed_differs_and_fixed_los_and_shadowing_are_kept() -> None:
    def run(seed: int) -> list[RoundDraw]:
        cell = Cell(CellConfig(), np.random.default_rng(seed))
        return [cell.draw_round(MODEL_BITS) for _ in range(3)]

    first, second, other = run(123), run(123), run(124)
    for a, b in zip(first, second, strict=True):
        for field in dataclasses.fields(RoundDraw):
            np.testing.assert_array_equal(getattr(a, field.name), getattr(b, field.name))
    assert not np.array_equal(first[0].distance_2d_m, other[0].distance_2d_m)
    # fixed LOS and shadowing are kept; fixed shadowing with redrawn LOS keeps its variate
    config = CellConfig(redraw_los_each_round=False, redraw_shadowing_each_round=False)
    cell = Cell(config, np.random.default_rng(21))
    draws = [cell.draw_round(MODEL_BITS) for _ in range(4)]
    for draw in draws[1:]:
        np.testing.assert_array_equal(draw.los, draws[0].los)
        np.testing.assert_array_equal(draw.gain_lin, draws[0].gain_lin)
    assert len({tuple(d.available) for d in draws}) > 1  # availability still redrawn
    # fixed shadowing with redrawn LOS keeps the normal variate
    config = CellConfig(num_devices=500, redraw_shadowing_each_round=False)
    cell = Cell(config, np.random.default_rng(22))
    draws = [cell.draw_round(MODEL_BITS) for _ in range(3)]
    z = [shadowing_db(cell, d) / channel.shadow_fading_std_db(d.los) for d in draws]
    np.testing.assert_allclose(z[1], z[0], atol=1e-9)
    np.testing.assert_allclose(z[2], z[0], atol=1e-9)
    assert not np.array_equal(draws[0].los, draws[1].los)


def test_round_draw_built_directly_ideal_channel() -> None:
    num = 5
    fields = {
        "available": np.ones(num, dtype=bool), "gain_lin": np.ones(num),
        "min_bandwidth_hz": np.zeros(num), "los": np.ones(num, dtype=bool),
        "distance_2d_m": np.full(num, 10.0),
    }  # fmt: skip
    ideal = RoundDraw(**fields)
    assert ideal.num_devices == num and np.isfinite(ideal.min_bandwidth_hz).all()
    with pytest.raises(ValueError, match="gain_lin"):
        RoundDraw(**{**fields, "gain_lin": np.ones(num + 1)})


def test_run_report_writes_summary_and_figure_also_with_nobody_available(tmp_path: Path) -> None:
    config = CellConfig(num_devices=20, availability_prob=0.5)
    summary = run_report(config, 153_920, rounds=50, seed=3, out_dir=tmp_path / "out")
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk == json.loads(json.dumps(summary))
    png = (tmp_path / "out" / "channel.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert set(summary["min_bandwidth_khz_quantiles"]) == {"p5", "p25", "p50", "p75", "p95"}
    quantiles = list(summary["min_bandwidth_khz_quantiles"].values())
    assert quantiles == sorted(quantiles)
    # Recompute the statistics round by round with the same seed.
    cell = Cell(config, np.random.default_rng(3))
    available, fit = [], []
    for _ in range(50):
        draw = cell.draw_round(153_920)
        demands = draw.min_bandwidth_hz[draw.available]
        available.append(demands.size)
        fit.append(count_fit_cheapest_first(demands, config.total_bandwidth_hz))
    assert summary["mean_available"] == pytest.approx(np.mean(available))
    assert summary["mean_fit_cheapest_first"] == pytest.approx(np.mean(fit))
    assert 0.0 <= summary["infeasible_share_of_available"] <= 1.0
    nobody = CellConfig(availability_prob=0.0)
    summary = run_report(nobody, 1e6, rounds=3, seed=0, out_dir=tmp_path / "nobody")
    assert summary["mean_available"] == 0.0
    assert summary["infeasible_share_of_available"] is None
    assert summary["min_bandwidth_khz_quantiles"] is None


def test_cli_prints_and_writes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    code = invoke(
        ["channel-report", "--out", str(out), "--num-devices", "20", "--availability-prob", "0.5",
         "--model-params", "4810", "--deadline-s", "0.002", "--rounds", "20"]
    )  # fmt: skip
    assert code == 0
    printed = capsys.readouterr().out
    assert "mean available devices per round" in printed
    assert "cheapest-first" in printed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_bits"] == 4810 * 32
    assert summary["config"]["deadline_s"] == 0.002


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--availability-prob", "1.5"], "availability_prob"),
        (["--total-bandwidth-hz", "-1"], "total_bandwidth_hz"),
        (["--num-devices", "0"], "num_devices"),
        (["--model-params", "0"], "--model-params"),
        (["--model-bits", "0"], "--model-bits"),
        (["--model-params", "9", "--model-bits", "9"], "not both"),
        (["--rounds", "0"], "rounds"),
        (["--seed", "-1"], "seed must be an integer >= 0, got -1"),
        (["--pathloss-model", "umi"], "pathloss-model"),
    ],
)
def test_cli_bad_values_exit_with_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert invoke(["channel-report", "--out", str(tmp_path / "out"), *argv]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and message in line, line
    assert not (tmp_path / "out").exists()
