"""A comparison's results: rows, statistics, tables, curves (docs/comparing.md)."""

from __future__ import annotations

import csv
import gzip
import io
import itertools
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.analysis.evidence import (
    EARLY_ROUNDS,
    INDICATOR_BASELINE,
    INDICATOR_COLUMNS,
    INDICATOR_POLICY,
    INDICATOR_TEST_COLUMNS,
    LATE_FRACTION,
    Reached,
    indicator_line,
    indicator_points,
    indicator_summary,
    rounds_to_target_test,
)
from experiments.analysis.figures import policy_name
from experiments.analysis.plot_runs import load_run, plot_estimates, plot_mean_runs, plot_runs
from experiments.analysis.statistics import (
    EQUIVALENCE_MARGIN,
    equivalence_test,
    holm,
    km_median,
    mean_ci95,
    paired_test,
)
from experiments.analysis.tables import write_csv
from server_app.run_folder.files import atomic_write, read_json_object
from server_app.run_folder.results import (
    CONFIG_FILE,
    METRICS_FILE,
    SUMMARY_FILE,
    mixed_code_line,
    run_digests,
)

REFERENCE_POLICY = "fedcgd-fscd"
VS = "_vs_fedcgd_fscd"
#: Metrics tested against the reference policy, paired by seed, and their column prefixes.
PAIRED_METRICS = {"final_accuracy": "", "max_accuracy": "best_"}
METRICS = ("final_accuracy", "max_accuracy", "rounds_to_target", "mean_scheduled", "mean_wemd")
RUN_COLUMNS = ("policy", "seed", *METRICS, "rounds_run", "devices_lost", "code", "result_dir")
COUNTS = ("earlier", "later", "tied")
#: The paired tests of rounds to the target against the reference (:class:`RoundsTest`).
ROUNDS_TEST_COLUMNS = (
    *(f"rounds_{k}{VS}" for k in COUNTS), "rounds_censored_pairs",
    *(f"rounds_{k}_p{VS}" for k in ("sign", "wilcoxon")),
)  # fmt: skip
#: Holm's families in one table (one setting: a comparison, or one sweep point of a preset),
#: each p column's ``<column>_holm`` twin adjusted over its family's columns of every policy
#: tested against the reference: the two accuracy endpoints (final and best) together, one
#: family; each rounds-to-target test (sign, signed-rank) a family of its own.
HOLM_FAMILIES = (
    (f"p_value{VS}", f"best_p_value{VS}"), (ROUNDS_TEST_COLUMNS[-2],), (ROUNDS_TEST_COLUMNS[-1],),
    (f"tost_p{VS}", f"best_tost_p{VS}"),
)  # fmt: skip
#: Each p-value column, each with a Holm-adjusted twin (``<column>_holm``).
P_COLUMNS = tuple(column for family in HOLM_FAMILIES for column in family)
#: ``table.csv``: per policy, each metric's mean and 95 % half-width (rounds to the target:
#: the Kaplan–Meier median), the paired tests and their Holm-adjusted p-values.
TABLE_COLUMNS = (
    "policy", "n_seeds",
    *(f"{metric}_{stat}" for metric in METRICS[:2] for stat in ("mean", "ci95")),
    "rounds_to_target_km_median", "reached_target",
    *(f"{metric}_{stat}" for metric in METRICS[3:] for stat in ("mean", "ci95")),
    *(f"{prefix}{stat}{VS}" for prefix in ("", "best_") for stat in ("diff", "p_value")),
    *(f"{prefix}tost_p{VS}" for prefix in ("", "best_")),
    *ROUNDS_TEST_COLUMNS, *(f"{column}_holm" for column in P_COLUMNS),
    "n_paired", "runs_with_lost_devices", "seeds",
)  # fmt: skip

#: ``rounds.csv.gz``: every run's rounds (accuracy where evaluated), to recompute any target.
ROUND_COLUMNS = ("policy", "seed", "round", "accuracy", "num_scheduled", "wemd")

#: How the console line flags a policy with runs that lost devices.
LOST_MARKER = "[!] devices lost"


def summarise(
    result_dir: Path, target_accuracy: float | None = None, seed: int | None = None
) -> dict[str, Any]:
    """One ``runs.csv`` row; ValueError: a damaged file."""
    policy, lines = load_run(result_dir)
    config_path = result_dir / CONFIG_FILE
    config = read_json_object(config_path) if config_path.exists() else None
    summary_path = result_dir / SUMMARY_FILE
    ran = read_json_object(summary_path).get("rounds") if summary_path.exists() else None
    rounds = sorted({int(x["round"]) for x in lines})
    if isinstance(ran, int) and rounds != list(range(1, ran + 1)):
        raise ValueError(
            f"{result_dir / METRICS_FILE}: holds {len(rounds)} of the {ran} rounds its "
            f"{SUMMARY_FILE} says ran (damaged); move the folder away to run it again"
        )
    evaluated = [x for x in lines if x.get("accuracy") is not None]
    accs = [x["accuracy"] for x in evaluated]
    wemds = [x["wemd"] for x in lines if x.get("wemd") is not None]
    target = math.inf if target_accuracy is None else target_accuracy
    reached = next((int(x["round"]) for x in evaluated if x["accuracy"] >= target), None)
    return {
        "policy": policy, "seed": seed, "final_accuracy": accs[-1] if accs else None,
        "max_accuracy": max(accs) if accs else None, "rounds_to_target": reached,
        "mean_scheduled": sum(x.get("num_scheduled", 0) for x in lines) / max(len(lines), 1),
        "mean_wemd": sum(wemds) / len(wemds) if wemds else None,
        "rounds_run": max((int(x["round"]) for x in lines), default=0),
        "devices_lost": sum(int(x.get("devices_lost") or 0) for x in lines),
        "code": run_digests(config), "result_dir": str(result_dir),
    }  # fmt: skip


def table_rows(
    runs: Sequence[Mapping[str, Any]],
    target_accuracy: float | None = None,
    reference: str = REFERENCE_POLICY,
) -> list[dict[str, Any]]:
    """One ``table.csv`` row per policy, in order of appearance, paired by seed against
    ``reference``, each p-value with its Holm twin over its family in the table
    (:func:`adjust_by_holm`; undefined: NaN or None)."""  # noqa: D205, D209
    by_policy: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        by_policy.setdefault(str(run["policy"]), []).append(run)
    ref = by_policy.get(reference, [])

    def reached(group: Sequence[Mapping[str, Any]]) -> dict[Any, Reached]:
        return {r["seed"]: (r["rounds_to_target"], int(r["rounds_run"])) for r in group}

    rows = []
    for policy, group in by_policy.items():
        row: dict[str, Any] = {"policy": policy, "n_seeds": len(group)}
        for metric in (m for m in METRICS if m != "rounds_to_target"):
            row[f"{metric}_mean"], row[f"{metric}_ci95"] = mean_ci95(r[metric] for r in group)
        row["rounds_to_target_km_median"] = row["reached_target"] = None
        if target_accuracy is not None:
            runs_reached = [(r["rounds_to_target"], int(r["rounds_run"])) for r in group]
            row["rounds_to_target_km_median"] = km_median(runs_reached)
            row["reached_target"] = sum(r is not None for r, _ in runs_reached)
        paired = policy != reference and bool(ref)
        for metric, prefix in PAIRED_METRICS.items():
            mine, theirs = ({r["seed"]: r[metric] for r in side} for side in (group, ref))
            test, tost = paired_test(mine, theirs), equivalence_test(mine, theirs)
            tested = paired and test.n >= 2
            row[f"{prefix}diff{VS}"] = test.mean_diff if tested else None
            row[f"{prefix}p_value{VS}"] = test.p_value if tested else None
            row[f"{prefix}tost_p{VS}"] = tost.p_value if tested else None
        row.update(dict.fromkeys(ROUNDS_TEST_COLUMNS))
        if paired and target_accuracy is not None:
            t = rounds_to_target_test(reached(group), reached(ref))
            values = (t.earlier, t.later, t.tied, t.censored, t.sign_p, t.wilcoxon_p)
            row.update(zip(ROUNDS_TEST_COLUMNS, values, strict=True))
        row["n_paired"] = test.n if paired else None
        row["runs_with_lost_devices"] = sum(int(r.get("devices_lost") or 0) > 0 for r in group)
        row["seeds"] = " ".join(str(r["seed"]) for r in group)
        rows.append(row)
    adjust_by_holm(rows)
    return rows


def adjust_by_holm(rows: Sequence[dict[str, Any]]) -> None:
    """Set each :data:`P_COLUMNS` column's ``<column>_holm`` twin in ``rows`` (one table): Holm
    over the p-values of its :data:`HOLM_FAMILIES` family, every column of it in every row
    (undefined ones, None or NaN, left out of the family and NaN)."""  # noqa: D205, D209
    for family in HOLM_FAMILIES:
        cells = [(row, column) for column in family for row in rows]
        adjusted = holm([row[column] for row, column in cells])
        for (row, column), value in zip(cells, adjusted, strict=True):
            row[f"{column}_holm"] = value


def _cell(value: Any) -> Any:
    """None and NaN as empty."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return value


def write_table(
    rows: Sequence[Mapping[str, Any]],
    path: Path,
    extra_columns: tuple[str, ...] = (),
    columns: Sequence[str] = TABLE_COLUMNS,
) -> None:
    """Write rows as CSV (``extra_columns`` first, e.g. the sweep point; None / NaN empty)."""
    cells = [{k: _cell(v) for k, v in row.items()} for row in rows]
    write_csv(path, cells, (*extra_columns, *columns))


def write_indicator(
    runs: Sequence[Mapping[str, Any]],
    out: Path,
    early_rounds: int = EARLY_ROUNDS,
    late_fraction: float = LATE_FRACTION,
) -> str | None:
    """``indicator.csv`` and ``indicator_test.csv`` under ``out``; the console line (None,
    nothing written, unless FedCGD-FSCD and BC both ran: docs/comparing.md)."""  # noqa: D205, D209
    policies = {str(run["policy"]) for run in runs}
    if not {INDICATOR_POLICY, INDICATOR_BASELINE} <= policies:
        return None
    points = indicator_points(runs, early_rounds, late_fraction)
    summary = indicator_summary(points, early_rounds, late_fraction)
    write_table(points, out / "indicator.csv", columns=INDICATOR_COLUMNS)
    write_table([summary], out / "indicator_test.csv", columns=INDICATOR_TEST_COLUMNS)
    rounds = [
        int(float(run["rounds_run"]))
        for run in runs
        if run["policy"] == INDICATOR_POLICY and str(run.get("rounds_run") or "") != ""
    ]
    return indicator_line(summary, rounds)


def indicator_from_folders(
    folders: Sequence[Path], out: Path, early_rounds: int, late_fraction: float
) -> str:
    """``fedcgd indicator`` over the ``runs.csv`` of ``folders``, pooled (a run's setting: its
    folder's name and sweep point); ValueError: one line."""  # noqa: D205, D209
    runs: list[dict[str, Any]] = []
    for folder in folders:
        path = folder / "runs.csv"
        if not path.is_file():
            raise ValueError(f"{folder}: no runs.csv (not the folder of a comparison or a preset)")
        with path.open(newline="") as handle:
            for row in csv.DictReader(handle):
                setting = f"{folder.name}/{row['sweep']}" if row.get("sweep") else folder.name
                runs.append({**row, "setting": setting})
    line = write_indicator(runs, out, early_rounds, late_fraction)
    if line is None:
        where = ", ".join(map(str, folders))
        raise ValueError(f"no {INDICATOR_POLICY} and {INDICATOR_BASELINE} runs under {where}")
    return line


def write_comparison(
    runs: Sequence[Mapping[str, Any]],
    out: Path,
    target_accuracy: float | None = None,
    by_sweep: bool = False,
) -> list[dict[str, Any]]:
    """``runs.csv``, ``table.csv``, ``table.md``, the indicator's tables and ``curves.png`` (with
    ``by_sweep``: rows per point, ``estimates.png``) under ``out``; the rows."""  # noqa: D205, D209
    extra = ("sweep",) if by_sweep else ()
    by_point: dict[str, list[Mapping[str, Any]]] = {}
    for run in runs:
        by_point.setdefault(str(run["sweep"]) if by_sweep else "", []).append(run)
    rows = [
        {**dict.fromkeys(extra, label), **row}
        for label, point_runs in by_point.items()
        for row in table_rows(point_runs, target_accuracy)
    ]
    write_table(runs, out / "runs.csv", extra, RUN_COLUMNS)
    write_rounds(runs, out / "rounds.csv.gz", extra)
    write_table(rows, out / "table.csv", extra)
    table = markdown_table(rows, target_accuracy, extra)
    atomic_write(out / "table.md", table)
    if (line := write_indicator(runs, out)) is not None:
        print(f"{line} ({out / 'indicator.csv'}, {out / 'indicator_test.csv'})", flush=True)
    warn_mixed_code(runs)
    groups: dict[Any, list[Path]] = {}
    for run in runs:
        key = (run["sweep"], str(run["policy"])) if by_sweep else str(run["policy"])
        groups.setdefault(key, []).append(Path(run["result_dir"]))
    if by_sweep:
        figure = plot_estimates(groups, out / "estimates.png")
    elif max(len(dirs) for dirs in groups.values()) > 1:
        figure = plot_mean_runs(groups, out / "curves.png")
    else:
        figure = plot_runs([d for dirs in groups.values() for d in dirs], out / "curves.png")
    notes = [] if by_sweep else same_schedule_lines(runs)
    print(table + "".join(f"{note}\n" for note in notes), end="", flush=True)
    print(f"wrote {out / 'table.md'}, {out / 'table.csv'}, {out / 'runs.csv'} and {figure}")
    return rows


def write_rounds(
    runs: Sequence[Mapping[str, Any]], path: Path, extra_columns: tuple[str, ...] = ()
) -> None:
    """Every run's rounds as gzip'd CSV (:data:`ROUND_COLUMNS`, ``extra_columns`` first; the
    same runs give the same bytes): the accuracy where evaluated, the scheduled number, WEMD."""  # noqa: D205, D209
    handle = io.StringIO(newline="")
    writer = csv.writer(handle)
    writer.writerow((*extra_columns, *ROUND_COLUMNS))
    for run in runs:
        _, lines = load_run(Path(run["result_dir"]))
        first = (*(run[c] for c in extra_columns), run["policy"], run["seed"])
        writer.writerows(
            (*first, x["round"], *(_cell(x.get(k)) for k in ROUND_COLUMNS[3:])) for x in lines
        )
    atomic_write(path, gzip.compress(handle.getvalue().encode(), mtime=0))


def same_schedule_lines(runs: Sequence[Mapping[str, Any]]) -> list[str]:
    """A line per pair of policies that scheduled the same devices in every round of the seeds
    both ran: such runs differ by nothing the policy decided."""  # noqa: D205, D209
    schedules: dict[str, dict[Any, list[Any]]] = {}
    for run in runs:
        _, lines = load_run(Path(run["result_dir"]))
        if not lines or not all(isinstance(x.get("scheduled"), list) for x in lines):
            continue  # nothing to compare (no rounds, or lines of a code that did not record it)
        per_round = [(x.get("round"), sorted(map(str, x["scheduled"]))) for x in lines]
        schedules.setdefault(str(run["policy"]), {})[run["seed"]] = per_round
    found = []
    for first, second in itertools.combinations(schedules, 2):
        seeds = sorted(set(schedules[first]) & set(schedules[second]), key=str)
        if seeds and all(schedules[first][s] == schedules[second][s] for s in seeds):
            rounds = sum(len(schedules[first][s]) for s in seeds)
            found.append(
                f"note: {first} and {second} scheduled the same devices in every round "
                f"({rounds} rounds over {len(seeds)} common seed(s)): the same runs, "
                "whatever their rules"
            )
    return found


def warn_mixed_code(runs: Sequence[Mapping[str, Any]]) -> None:
    """Print ``run_folder.results.mixed_code_line`` when the runs' code differs."""
    line = mixed_code_line([str(run.get("code") or "unknown") for run in runs])
    if line is not None:
        print(line, file=sys.stderr, flush=True)


def _text(value: Any, fmt: str) -> str:
    """``value`` formatted, or ``–`` when undefined (None, NaN, empty)."""
    return "–" if _cell(value) == "" else format(value, fmt)


def markdown_table(
    rows: Sequence[Mapping[str, Any]],
    target_accuracy: float | None = None,
    extra_columns: tuple[str, ...] = (),
) -> str:
    """``table.md``: a line per row, the columns a reader compares rounded as in
    docs/comparing.md (each test: p, then Holm's; no target: no rounds to it)."""  # noqa: D205, D209
    rounds_header = [
        f"median rounds to {target_accuracy:g} (reached)",
        "FSCD earlier / later / tied (sign p / Holm)",
    ] if target_accuracy is not None else []  # fmt: skip
    header = [
        *extra_columns, "policy", "final accuracy", "best accuracy", *rounds_header,
        "scheduled", "WEMD", "final − FSCD (p / Holm)", "best − FSCD (p / Holm)",
        f"within ±{EQUIVALENCE_MARGIN:g} of FSCD, final; best (TOST p / Holm)",
        "runs with lost devices",
    ]  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]

    def mean_ci(row: Mapping[str, Any], metric: str, fmt: str) -> str:
        text, ci = _text(row[f"{metric}_mean"], fmt), _text(row[f"{metric}_ci95"], fmt)
        return text if "–" in (text, ci) else f"{text} ± {ci}"

    def p_holm(row: Mapping[str, Any], p: str) -> str:
        return f"{_text(row.get(p), '.3g')} / {_text(row.get(p + '_holm'), '.3g')}"

    def tested(row: Mapping[str, Any], value: str, p: str) -> str:
        return f"{value} ({p_holm(row, p)})"

    for row in rows:
        rounds, sign, diffs, tost = "–", "–", ["–", "–"], "–"
        if _cell(row.get("reached_target")) != "":
            median = float(_cell(row.get("rounds_to_target_km_median")) or math.inf)
            median_text = "–" if math.isinf(median) else f"{median:.0f}"
            rounds = f"{median_text} ({row['reached_target']}/{row['n_seeds']})"
        if _cell(row.get(f"rounds_earlier{VS}")) != "":
            earlier, later, tied = (row[f"rounds_{k}{VS}"] for k in COUNTS)
            sign = tested(row, f"{later} / {earlier} / {tied}", f"rounds_sign_p{VS}")
        for i, prefix in enumerate(PAIRED_METRICS.values()):
            if _cell(diff := row.get(f"{prefix}diff{VS}")) != "":
                diffs[i] = tested(
                    row, format(diff, "+.3f").replace("-", "−"), f"{prefix}p_value{VS}"
                )
                tost = "; ".join(p_holm(row, f"{p}tost_p{VS}") for p in PAIRED_METRICS.values())
        lost = row.get("runs_with_lost_devices") or 0
        cells = [
            *(str(row[c]) for c in extra_columns), policy_name(str(row["policy"])),
            mean_ci(row, "final_accuracy", ".3f"), mean_ci(row, "max_accuracy", ".3f"),
            *[rounds, sign][: len(rounds_header)], mean_ci(row, "mean_scheduled", ".2f"),
            mean_ci(row, "mean_wemd", ".3f"), *diffs, tost,
            f"{LOST_MARKER} {lost} of {row['n_seeds']}" if lost else "0",
        ]  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
