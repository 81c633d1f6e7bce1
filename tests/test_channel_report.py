"""Channel report: run_report files and numbers, and the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from channel import Cell, CellConfig, count_fit_cheapest_first
from channel.report import run_report
from experiments.cli import invoke


def test_run_report_writes_summary_and_figure(tmp_path: Path) -> None:
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


def test_run_report_with_nobody_available(tmp_path: Path) -> None:
    summary = run_report(CellConfig(availability_prob=0.0), 1e6, rounds=3, seed=0, out_dir=tmp_path)
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
