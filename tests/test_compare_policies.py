"""``fedcgd compare`` over seeds, ``run_flwr`` replaced: result folders are written by hand."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pytest
from fake_runs import (
    CRASHED,
    SCHEDULED,
    fake_run,
    finishing_flwr,
    last_two_lines,
    read_csv,
    rerun_command,
    write_run,
)
from scipy import stats

from experiments.cli import invoke
from experiments.compare import execution, results
from experiments.compare import plans as planning
from server_app.run_folder.files import Interrupted
from server_app.run_folder.run_status import FAILED, RUNNING, read_status

# policy -> seed -> test accuracy per round (rounds 1, 2, 3)
ACCURACY = {
    "fedcgd-fscd": {0: [0.30, 0.55, 0.70], 1: [0.40, 0.65, 0.60], 2: [0.20, 0.50, 0.72]},
    "bc": {0: [0.30, 0.50, 0.60], 1: [0.35, 0.45, 0.58], 2: [0.10, 0.52, 0.61]},
}


def write_all(out: Path, accuracy: dict[str, dict[int, list[float]]] = ACCURACY) -> None:
    for policy, per_seed in accuracy.items():
        for seed, accs in per_seed.items():
            fake_run(planning.run_dir(out, policy, seed), policy, seed, accs)


def no_flwr(*args, **kwargs):
    raise AssertionError("finished runs must not run again")


def ci95(x: list[float]) -> float:
    return float(stats.t.ppf(0.975, len(x) - 1) * np.std(x, ddof=1) / np.sqrt(len(x)))


def test_tables_from_finished_runs(tmp_path, monkeypatch, capsys):
    out = tmp_path / "cmp"
    write_all(out)
    monkeypatch.setattr(execution, "run_flwr", no_flwr)
    result = execution.run_policies(
        ["fedcgd-fscd", "bc"], {}, out, seeds=[0, 1, 2], target_accuracy=0.6
    )
    assert len(result.runs) == 6 and result.code == 0
    printed = capsys.readouterr().out
    assert "[policy 1/2, seed 1/3] fedcgd-fscd seed=0" in printed
    assert "[policy 2/2, seed 3/3] bc seed=2" in printed
    last = printed.strip().splitlines()
    assert not [line for line in last if line.startswith("{")]  # no dict per run
    assert last[-1].startswith(f"wrote {out / 'table.md'}, {out / 'table.csv'}")
    assert last[-5:-1] == (out / "table.md").read_text().splitlines()  # the table, printed

    by_run = {(r["policy"], r["seed"]): r for r in read_csv(out / "runs.csv")}
    assert set(by_run) == {(p, str(s)) for p in ACCURACY for s in (0, 1, 2)}
    assert by_run[("bc", "1")]["rounds_to_target"] == ""  # never reached 0.6
    assert by_run[("bc", "0")]["rounds_to_target"] == "3"
    assert by_run[("fedcgd-fscd", "1")]["rounds_to_target"] == "2"  # the first round at 0.6
    assert Path(by_run[("bc", "2")]["result_dir"]) == out / "bc" / "seed-2"
    with gzip.open(out / "rounds.csv.gz", "rt", newline="") as handle:
        rounds = list(csv.DictReader(handle))
    assert list(rounds[0]) == ["policy", "seed", "round", "accuracy", "num_scheduled", "wemd"]
    assert [
        (x["policy"], int(x["seed"]), int(x["round"]), float(x["accuracy"]),
         int(x["num_scheduled"]), float(x["wemd"])) for x in rounds
    ] == [
        (p, s, r, acc, SCHEDULED[p][r - 1] + s, 0.1 * r + 0.01 * s)
        for p, per_seed in ACCURACY.items() for s, accs in per_seed.items()
        for r, acc in enumerate(accs, start=1)
    ]  # fmt: skip
    results.write_rounds(result.runs, tmp_path / "again.csv.gz")  # the same runs, the same bytes
    assert (tmp_path / "again.csv.gz").read_bytes() == (out / "rounds.csv.gz").read_bytes()

    table = {r["policy"]: r for r in read_csv(out / "table.csv")}
    assert list(read_csv(out / "table.csv")[0]) == list(results.TABLE_COLUMNS)
    for policy, per_seed in ACCURACY.items():
        row = table[policy]
        final = [accs[-1] for accs in per_seed.values()]
        best = [max(accs) for accs in per_seed.values()]
        scheduled = [np.mean(SCHEDULED[policy]) + s for s in per_seed]
        wemd = [0.2 + 0.01 * s for s in per_seed]
        assert row["n_seeds"] == "3" and row["seeds"] == "0 1 2"
        names = ("final_accuracy", "max_accuracy", "mean_scheduled", "mean_wemd")
        for name, values in zip(names, (final, best, scheduled, wemd), strict=True):
            assert float(row[f"{name}_mean"]) == pytest.approx(np.mean(values)), name
            assert float(row[f"{name}_ci95"]) == pytest.approx(ci95(values)), name
    # rounds to 0.6: fedcgd-fscd 3, 2, 3; bc 3, never, 3: the Kaplan–Meier medians (the first
    # round by which at least half reached it: 2 of 3 by round 3 in both)
    assert table["fedcgd-fscd"]["reached_target"] == "3"
    assert float(table["fedcgd-fscd"]["rounds_to_target_km_median"]) == 3
    assert table["bc"]["reached_target"] == "2"
    assert float(table["bc"]["rounds_to_target_km_median"]) == 3

    for prefix, reduce in (("", lambda accs: accs[-1]), ("best_", max)):
        bc, ref = ([reduce(ACCURACY[p][s]) for s in (0, 1, 2)] for p in ("bc", "fedcgd-fscd"))
        d = np.subtract(bc, ref)
        t = d.mean() / (d.std(ddof=1) / np.sqrt(3))
        assert float(table["bc"][f"{prefix}diff_vs_fedcgd_fscd"]) == pytest.approx(d.mean())
        p_value = float(table["bc"][f"{prefix}p_value_vs_fedcgd_fscd"])
        assert p_value == pytest.approx(2 * stats.t.sf(abs(t), 2))
        assert p_value == pytest.approx(stats.ttest_rel(bc, ref).pvalue)
    assert table["bc"]["n_paired"] == "3"
    assert table["bc"]["best_p_value_vs_fedcgd_fscd"] != table["bc"]["p_value_vs_fedcgd_fscd"]
    for key in ("diff", "p_value", "best_diff", "best_p_value"):
        assert table["fedcgd-fscd"][f"{key}_vs_fedcgd_fscd"] == ""
    assert table["fedcgd-fscd"]["n_paired"] == ""
    assert (out / "curves.png").stat().st_size > 0
    # rounds to 0.6, bc − fscd: 0, (3 + 1) − 2 = 2 (bc never reached it in its 3 rounds), 0
    assert {r["rounds_run"] for r in by_run.values()} == {"3"}
    counts = [table["bc"][f"rounds_{k}_vs_fedcgd_fscd"] for k in ("earlier", "later", "tied")]
    assert counts == ["0", "1", "2"] and table["bc"]["rounds_censored_pairs"] == "1"
    # one untied pair: the exact sign test and both sign flips are as extreme, p = 1
    assert float(table["bc"]["rounds_sign_p_vs_fedcgd_fscd"]) == pytest.approx(1.0)
    assert float(table["bc"]["rounds_wilcoxon_p_vs_fedcgd_fscd"]) == pytest.approx(1.0)
    assert all(table["fedcgd-fscd"][key] == "" for key in results.ROUNDS_TEST_COLUMNS)
    # the indicator: the last 20 % of 3 rounds is round 3: gaps 0.10, 0.02, 0.11 against
    # Ĝ/σ̂ = (0.5 + s) / (1 + s): ranks (1 2 3) and (2 1 3), rho = 1 − 6 · 2 / (3 · 8) = 0.5
    points = read_csv(out / "indicator.csv")
    assert [p["seed"] for p in points] == ["0", "1", "2"]
    assert [float(p["gap_late"]) for p in points] == pytest.approx([0.10, 0.02, 0.11])
    (summary,) = read_csv(out / "indicator_test.csv")
    assert summary["n_points"] == "3" and summary["early_rounds"] == "50"
    assert float(summary["spearman_rho"]) == pytest.approx(0.5)


def test_pairs_only_common_seeds_and_one_seed_has_no_interval(tmp_path, monkeypatch):
    monkeypatch.setattr(execution, "run_flwr", no_flwr)
    out = tmp_path / "partial"
    write_all(out, {"fedcgd-fscd": {0: [0.5], 1: [0.6], 2: [0.7]}, "poc": {1: [0.4], 2: [0.8]}})
    execution.run_policies(["fedcgd-fscd", "poc"], {}, out, seeds=[1, 2])
    row = {r["policy"]: r for r in read_csv(out / "table.csv")}["poc"]
    assert row["n_paired"] == "2"
    assert float(row["diff_vs_fedcgd_fscd"]) == pytest.approx(((0.4 - 0.6) + (0.8 - 0.7)) / 2)
    assert row["reached_target"] == "" and row["rounds_to_target_km_median"] == ""
    assert not (out / "indicator.csv").exists()  # no BC to pair FedCGD-FSCD with
    rows = results.table_rows(
        [{"policy": "bc", "seed": s, **dict.fromkeys(results.METRICS, 0.5 + s)} for s in (0, 1)]
    )  # no reference policy
    assert rows[0]["diff_vs_fedcgd_fscd"] is None and rows[0]["p_value_vs_fedcgd_fscd"] is None
    out = tmp_path / "one"
    write_all(out, {p: {0: accs[0]} for p, accs in ACCURACY.items()})
    execution.run_policies(list(ACCURACY), {}, out, seeds=[0])
    for row in read_csv(out / "table.csv"):
        assert row["n_seeds"] == "1" and row["final_accuracy_ci95"] == ""
        assert row["p_value_vs_fedcgd_fscd"] == "" and row["diff_vs_fedcgd_fscd"] == ""
    assert float(row["final_accuracy_mean"]) == ACCURACY[row["policy"]][0][-1]
    assert (out / "curves.png").stat().st_size > 0


def test_command_line_seeds_and_policies_named_by_their_figure_labels(tmp_path, monkeypatch):
    """``FedCGD-FSCD`` and ``BC (best channel)`` (any case): the runs, folders and CSVs say the
    names (table.md the labels: test_table_md_holds_the_reader_columns_rounded_as_in_the_docs).
    A policy named by file path: tables and console lines use its folder's label, not the path."""
    calls: list[dict] = []
    monkeypatch.setattr(execution, "run_flwr", finishing_flwr(calls))
    out = tmp_path / "cli"
    args = ["--policies", "FedCGD-FSCD,bc (BEST CHANNEL)", "--out", str(out)]
    assert invoke(["compare", *args, "--seeds", "3,1"]) == 0
    seen = [(c["policy"], c["seed"]) for c in calls]
    assert seen == [("fedcgd-fscd", 3), ("fedcgd-fscd", 1), ("bc", 3), ("bc", 1)]
    assert (out / "bc" / "seed-1" / "summary.json").exists()
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["bc", "fedcgd-fscd"]
    assert [r["policy"] for r in read_csv(out / "table.csv")] == ["fedcgd-fscd", "bc"]
    calls.clear()
    assert invoke(["compare", *args, "--run-config", "seed=7"]) == 0  # one seed from the run config
    assert [(c["policy"], c["seed"]) for c in calls] == [("fedcgd-fscd", 7), ("bc", 7)]
    policy = f"{Path('examples/proportional_fair.py').resolve()}:ProportionalFair"
    folder = tmp_path / "ProportionalFair" / "seed-0"
    write_run(folder, {"policy": policy, "seed": 0}, [{"round": 1, "accuracy": 0.5}])
    assert results.summarise(folder)["policy"] == "ProportionalFair"
    plan = planning.PlannedRun(policy, 0, folder, {}, planning.RUN)
    assert plan.label == "ProportionalFair/seed-0"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--seeds", "0,a"], "comma-separated integers"), (["--seeds", "0,1,0"], "repeats"),
        (["--seeds", "-1"], "non-negative"), (["--seeds", ","], "at least one"),
        (["--seeds", "0,1", "--run-config", "seed=2"], "not both"),
        (
            ["--policies", "bc,fedcgd-fcsd"],
            "'policy' = 'fedcgd-fcsd'; did you mean fedcgd-fscd or fedcgd-cd? allowed: fedcgd-fscd",
        ),
    ],
)  # fmt: skip
def test_command_line_errors(extra, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(execution, "run_flwr", no_flwr)
    assert invoke(["compare", "--out", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and err.count("\n") == 1


def test_kept_runs_with_other_settings_are_refused_before_any_run(tmp_path, monkeypatch, capsys):
    """The adversarial case: 50-round seed-0 runs kept, 3 rounds with seeds 0 and 1 asked."""
    out = tmp_path / "stale"
    for p in ("fedcgd-fscd", "bc"):
        fake_run(planning.run_dir(out, p, 0), p, 0, [0.5, 0.6, 0.7], {"num-server-rounds": 50})
    monkeypatch.setattr(execution, "run_flwr", no_flwr)
    args = ["--policies", "fedcgd-fscd,bc", "--seeds", "0,1", "--out", str(out)]
    assert invoke(["compare", *args, "--run-config", "num-server-rounds=3"]) == 2
    err = capsys.readouterr().err
    kept = out / "fedcgd-fscd" / "seed-0"
    assert err.startswith(f"error: {kept}: num-server-rounds = 50 there, 3 now; "), err
    assert err.count("\n") == 1, err
    assert not (out / "bc" / "seed-1").exists()  # nothing ran, not even the new seed
    assert not (out / "table.csv").exists()


def test_only_where_and_how_often_a_run_saves_may_differ(tmp_path):
    folder, cifar_folder = (planning.run_dir(tmp_path, "bc", s) for s in (0, 1))
    kept = {"num-server-rounds": 2, "checkpoint-every": 1}
    fake_run(folder, "bc", 0, [0.5, 0.6], kept)
    elsewhere = {"num-server-rounds": 2, "data-dir": str(tmp_path / "other")}
    for asked in ({"num-server-rounds": 2}, elsewhere):  # digits ignore data-dir; CIFAR does not
        assert planning.plan_run("bc", 0, folder, asked).action == planning.KEEP
    with pytest.raises(ValueError, match=r"seed-0: local-steps = 10 there, 3 now; "):
        planning.plan_run("bc", 0, folder, {**kept, "local-steps": 3})
    cifar = {"dataset": "cifar10", "num-server-rounds": 2}
    fake_run(cifar_folder, "bc", 1, [0.5, 0.6], cifar)
    with pytest.raises(ValueError, match=r"seed-1: data-dir = '"):
        planning.plan_run("bc", 1, cifar_folder, {**cifar, **elsewhere})


NO_STATUS = (
    "exit code 1: the run wrote no status in {} since it was launched (the ServerApp stopped "
    "before its start or crashed; see the log above)"
)


@pytest.mark.parametrize(
    ("how", "reason"),
    [("exit", NO_STATUS), ("status", "RuntimeError: ActorPool is empty"), ("crash", CRASHED)],
)
def test_a_failed_run_is_named_with_its_reason_and_the_printed_command_runs_it_again(
    how, reason, tmp_path, monkeypatch, capsys
):
    """``flwr run`` exits 1, or 0 when the ServerApp raises (the reason: status.json) or when the
    simulation crashed before the ServerApp said why (the reason: Flower's first ERROR line)."""
    fails = lambda c: how if (c["policy"], c["seed"]) == ("bc", 1) else None  # noqa: E731
    calls: list[dict] = []
    monkeypatch.setattr(execution, "run_flwr", finishing_flwr(calls, lambda c: [0.5, 0.6], fails))
    out = tmp_path / "failing"
    args = ["--policies", "fedcgd-fscd,bc", "--seeds", "0,1", "--run-config", "num-server-rounds=2"]
    args += ["--out", str(out)]
    assert invoke(["compare", *args]) == 1
    seen = [(c["policy"], c["seed"], c["num-server-rounds"]) for c in calls]
    assert seen == [(p, s, 2) for p in ("fedcgd-fscd", "bc") for s in (0, 1)]
    assert calls[0]["result-dir"] == str(out / "fedcgd-fscd" / "seed-0")
    failed, last = last_two_lines(capsys, out)
    reason = reason.format(out / "bc" / "seed-1")
    code, said = reason.rpartition("exit code 1: ")[1:]  # what the run said: cut at 200
    reason = code + (said if len(said) <= 200 else said[:197] + "...")
    assert (
        failed == f"1 of 4 runs failed: bc/seed-1 ({reason}); the tables hold the 3 completed runs"
    )
    assert rerun_command(last) == args
    runs = [(r["policy"], r["seed"]) for r in read_csv(out / "runs.csv")]
    assert runs == [("fedcgd-fscd", "0"), ("fedcgd-fscd", "1"), ("bc", "0")]
    # the printed command again: the failed run (no checkpoint) is cleared and run again; the
    # others are kept
    args, calls = rerun_command(last), []
    monkeypatch.setattr(execution, "run_flwr", finishing_flwr(calls, lambda c: [0.7, 0.8]))
    assert invoke(["compare", *args]) == 0
    assert [(c["policy"], c["seed"]) for c in calls] == [("bc", 1)]
    assert capsys.readouterr().out.strip().splitlines()[-1] == "all 4 runs completed"
    assert len(read_csv(out / "runs.csv")) == 4


def test_a_summary_is_kept_a_checkpoint_resumed_anything_else_run_from_the_start(
    tmp_path, monkeypatch
):
    """Decided by the files alone: neither a status nor a stopped run's settings decide."""
    shared = {"num-server-rounds": 3}
    kept, resumed, stopped = (planning.run_dir(tmp_path, "bc", s) for s in (0, 1, 2))
    fake_run(kept, "bc", 0, [0.5, 0.6, 0.7], shared)
    (kept / "status.json").unlink()  # from before status files: the summary decides
    fake_run(resumed, "bc", 1, [0.5], shared, state=RUNNING, summary=False)
    assert read_status(resumed).state == RUNNING
    fake_run(stopped, "bc", 2, [0.5], {"num-server-rounds": 50}, state=FAILED, summary=False)
    for folder in (kept, resumed):
        (folder / "checkpoint.pt").write_bytes(b"a checkpoint")
    (stopped / "notes.txt").write_text("mine")
    calls: list[dict] = []
    monkeypatch.setattr(execution, "run_flwr", finishing_flwr(calls, lambda c: [0.5, 0.6, 0.8]))
    plans = planning.plan_runs(["bc"], shared, tmp_path, [0, 1, 2])
    assert [p.action for p in plans] == [planning.KEEP, planning.RESUME, planning.RUN]
    result = execution.run_policies(["bc"], shared, tmp_path, seeds=[0, 1, 2])
    assert [(c["seed"], c.get("resume-from")) for c in calls] == [(1, str(resumed)), (2, None)]
    assert result.code == 0 and [r["final_accuracy"] for r in result.runs] == [0.7, 0.8, 0.8]
    assert (stopped / "notes.txt").read_text() == "mine"


def test_a_signal_gives_its_exit_code_and_one_line(tmp_path, monkeypatch, capsys):
    def interrupted(run_config, **kwargs):
        raise Interrupted(15)

    monkeypatch.setattr(execution, "run_flwr", interrupted)
    assert invoke(["compare", "--policies", "bc", "--out", str(tmp_path)]) == 143
    err = capsys.readouterr().err
    assert err.strip().splitlines()[0] == (
        "stopped by SIGTERM: every process of the run was stopped (exit code 143)"
    )
    last = err.strip().splitlines()[1]
    assert rerun_command(last) == ["--policies", "bc", "--out", str(tmp_path)]


def test_table_md_holds_the_reader_columns_rounded_as_in_the_docs():
    """``table.md`` from hand-made runs; every cell computed by hand (Student t, 1 d.f.)."""

    def run(policy, seed, final, best, reached, scheduled, lost=0):
        return {
            "policy": policy, "seed": seed, "final_accuracy": final, "max_accuracy": best,
            "rounds_to_target": reached, "mean_scheduled": scheduled, "mean_wemd": 0.2,
            "rounds_run": 50, "devices_lost": lost,
        }  # fmt: skip

    runs = [
        run("fedcgd-fscd", 0, 0.8, 0.9, 10, 5.0),
        run("fedcgd-fscd", 1, 0.9, 0.9, 20, 7.0),
        run("bc", 0, 0.7, 0.8, 30, 6.0),
        run("bc", 1, 0.7, 0.75, None, 6.0, lost=3),
    ]
    text = results.markdown_table(results.table_rows(runs, 0.75), 0.75)
    header, rule, fscd, bc = text.splitlines()
    rounds = ["median rounds to 0.75 (reached)", "FSCD earlier / later / tied (sign p / Holm)"]
    assert header.split(" | ")[3:5] == rounds
    assert rule == "|" + "---|" * 11
    # t(0.975, 1) = 12.706: 0.05 · 12.706 = 0.635 and 1 · 12.706 = 12.71; the Kaplan–Meier
    # median of rounds 10 and 20 is 10 (half reached it by round 10)
    assert fscd == (
        "| FedCGD-FSCD | 0.850 ± 0.635 | 0.900 ± 0.000 | 10 (2/2) | – | 6.00 ± 12.71 "
        "| 0.200 ± 0.000 | – | – | – | 0 |"
    )
    # paired t: diffs (−0.1, −0.2): t = −3, p = 1 − 2·atan(3)/π = 0.2048; best (−0.1, −0.15):
    # t = −5, p = 1 − 2·atan(5)/π = 0.1257; rounds: BC later on both seeds, sign p = 0.5; one
    # policy against FSCD: both endpoints one Holm family, 2 · 0.1257 = 0.2514 for each (the
    # final's 0.2048 raised to it); the sign test alone: its p; BC's median: half reached it by
    # round 30; TOST at ±0.01: the larger one-sided p, H0 mean ≤ −0.01: final
    # t = (−0.15 + 0.01) / 0.05 = −2.8, p = 1/2 + atan(2.8)/π = 0.891; best t = (−0.125 + 0.01) /
    # 0.025 = −4.6, p = 1/2 + atan(4.6)/π = 0.932; Holm over the two: 1 and 1
    assert bc == (
        "| BC (best channel) | 0.700 ± 0.000 | 0.775 ± 0.318 | 30 (1/2) | 2 / 0 / 0 (0.5 / 0.5) "
        "| 6.00 ± 0.00 "
        f"| 0.200 ± 0.000 | −0.150 (0.205 / 0.251) | −0.125 (0.126 / 0.251) "
        f"| 0.891 / 1; 0.932 / 1 | {results.LOST_MARKER} 1 of 2 |"
    )  # fmt: skip
    header, rule, fscd, bc = results.markdown_table(results.table_rows(runs)).splitlines()
    assert header == (  # without a target: no columns of rounds to the target
        "| policy | final accuracy | best accuracy | scheduled | WEMD | final − FSCD (p / Holm) "
        "| best − FSCD (p / Holm) | within ±0.01 of FSCD, final; best (TOST p / Holm) "
        "| runs with lost devices |"
    )
    assert rule == "|" + "---|" * 9
    cells = "0.850 ± 0.635 | 0.900 ± 0.000 | 6.00 ± 12.71 | 0.200 ± 0.000"
    assert fscd == f"| FedCGD-FSCD | {cells} | – | – | – | 0 |"


def test_policies_that_schedule_alike_in_every_round_are_named_once(tmp_path):
    def run(policy, seed, schedules):
        folder = tmp_path / policy / f"seed-{seed}"
        lines = [
            {"round": r, "accuracy": 0.5, "num_scheduled": len(s), "scheduled": s}
            for r, s in enumerate(schedules, start=1)
        ]
        write_run(folder, {"policy": policy, "seed": seed}, lines)
        return {"policy": policy, "seed": seed, "result_dir": str(folder)}

    runs = [
        run("bc", 0, [[1, 2], [3]]), run("bc", 1, [[4], [5, 6]]),
        run("fedcgd-gs", 0, [[2, 1], [3]]),  # the same sets, listed in another order
        run("fedcgd-gs", 1, [[4], [5, 6]]), run("fedcgd-fscd", 0, [[1, 2], [3]]),
        run("fedcgd-fscd", 1, [[4], [5]]),  # one round differs in one seed: not named
    ]  # fmt: skip
    assert results.same_schedule_lines(runs) == [
        "note: bc and fedcgd-gs scheduled the same devices in every round (4 rounds over 2 "
        "common seed(s)): the same runs, whatever their rules"
    ]
    assert results.same_schedule_lines(runs[:2] + runs[4:]) == []


def test_policy_params_no_policy_takes_are_refused_with_each_policys_reason(tmp_path):
    module = tmp_path / "mypol.py"
    module.write_text(
        "from dataclasses import dataclass\n\nfrom fedcgd_strategy import Policy\n\n\n"
        "@dataclass\nclass P(Policy):\n    per_round: int = 1\n\n"
        "    def schedule(self, inputs, rng):\n        raise AssertionError\n"
    )
    shared = {"policy-params.per_round": 3}
    with pytest.raises(ValueError) as info:
        planning.check_policy_params_used(["bc", f"{module}:P"], shared)
    assert str(info.value) == (
        f"run-config policy-params {{'per_round': 3}}: none of the policies bc, {module}:P takes "
        "all of them; run-config key policy-params.per_round: policy 'bc' takes no parameter "
        "'per_round'; allowed: none; run-config key policy-params.per_round: written per-round "
        "(kebab case); allowed: per-round"
    )


def test_a_kept_run_damaged_after_planning_is_a_failed_run_not_half_a_table(tmp_path):
    for policy in ("fedcgd-fscd", "bc"):
        for seed in (0, 1):
            fake_run(planning.run_dir(tmp_path, policy, seed), policy, seed, [0.5, 0.6, 0.7])
    points = [("", planning.plan_runs(["fedcgd-fscd", "bc"], {}, tmp_path, [0, 1]))]
    (planning.run_dir(tmp_path, "bc", 0) / "metrics.jsonl").write_text("{broken\n")
    result = execution.run_points(points, tmp_path, execution.LaunchSettings("simulation"), None)
    assert [name for name, _ in result.failed] == ["bc/seed-0"]
    assert "metrics.jsonl line 1" in result.failed[0][1]
    kept = {(r["policy"], r["seed"]) for r in read_csv(tmp_path / "runs.csv")}
    assert kept == {("fedcgd-fscd", "0"), ("fedcgd-fscd", "1"), ("bc", "1")}


def test_a_kept_run_that_failed_stays_failed_and_out_of_the_tables(tmp_path):
    """A run whose rounds all ran but that failed (say most aggregations failed) wrote a
    summary; run again, the comparison keeps it as the failure it was (docs/aggregation.md)."""
    why = "aggregation failed in 3 of the 3 rounds with uploads"
    fake_run(planning.run_dir(tmp_path, "fedcgd-fscd", 0), "fedcgd-fscd", 0, [0.5, 0.6, 0.7])
    fake_run(planning.run_dir(tmp_path, "bc", 0), "bc", 0, [0.1] * 3, state=FAILED, reason=why)
    points = [("", planning.plan_runs(["fedcgd-fscd", "bc"], {}, tmp_path, [0]))]
    result = execution.run_points(points, tmp_path, execution.LaunchSettings("simulation"), None)
    assert result.failed == [("bc/seed-0", f"failed earlier: {why}")] and result.code == 1
    assert {r["policy"] for r in read_csv(tmp_path / "runs.csv")} == {"fedcgd-fscd"}
