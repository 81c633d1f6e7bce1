"""The solver-performance figure script on a tiny setting: CSV columns and values consistent."""

from pathlib import Path

import numpy as np
import pytest
from fake_runs import read_csv

from experiments.cli import invoke
from experiments.paper import solver_performance


def test_tiny_run_writes_consistent_csv_and_only_under_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No copy into a tracked folder (docs/img) unless --docs-png asks for it."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "docs" / "img").mkdir(parents=True)
    argv = "--instances 2 --num-devices 8,12 --alphas 0.1,10 --ratios 0.3,3 --milp-time-limit-s 0"
    assert invoke(["paper", "solver-performance", "--out", "out", *argv.split()]) == 0
    assert sorted(p.name for p in (tmp_path / "docs" / "img").iterdir()) == []
    out = tmp_path / "out"
    assert {p.name for p in out.iterdir()} == {"rows.csv", "solver_performance.png", "summary.csv"}
    rows = read_csv(out / "rows.csv")
    assert list(rows[0]) == solver_performance.ROW_FIELDS
    assert len(rows) == 2 * 2 * 2 * 2  # V x alpha x instances x ratios
    for row in rows:
        optimum = float(row["opt_objective"])
        assert row["opt_proven"] == "True"  # no time limit: every optimum is proven
        assert float(row["sigma"]) == pytest.approx(float(row["ratio"]) * np.sqrt(32))
        for method in ("gs", "fscd", "cd"):
            objective = float(row[f"{method}_objective"])
            error = float(row[f"{method}_rel_error"])
            assert objective >= optimum * (1 - 1e-9)
            assert error == pytest.approx((objective - optimum) / optimum, abs=1e-12)
            assert error >= -1e-9
            assert int(row[f"{method}_iterations"]) >= 0
    summary = read_csv(out / "summary.csv")
    for entry in summary:
        same_v = [r for r in rows if int(r["num_devices"]) == int(entry["num_devices"])]
        group = [r for r in same_v if entry["ratio"] in ("all", r["ratio"])]
        method = entry["method"]
        assert int(entry["instances"]) == len(group)
        expected = np.mean([float(r[f"{method}_rel_error"]) for r in group])
        assert float(entry["mean_rel_error"]) == pytest.approx(expected, abs=1e-12)
        iterations = np.mean([float(r[f"{method}_iterations"]) for r in group])
        assert float(entry["mean_iterations"]) == pytest.approx(iterations)
    assert (out / "solver_performance.png").stat().st_size > 0
    assert solver_performance.figure_title([0.1, 1.0, 10.0], 3) == (
        "P1 instances: UMi uplinks, CIFAR-10 CNN (258,898 × 32 bit), deadline 2 s"
        " · Dirichlet α = 0.1, 1, 10 · 3 per (V, α)"
    )
