"""Planning a comparison: settings checked, each (policy, seed) kept, resumed or run anew."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.compare.results import summarise
from experiments.run.run_config import validated_run_config, with_resolved_data_dir
from fedcgd_config.imports import reference_label
from fedcgd_config.settings import unread_settings
from server_app.run_folder.files import read_json_object
from server_app.run_folder.folder_lock import FolderClaim, claim_folder, probe_free
from server_app.run_folder.results import CHECKPOINT_FILE, CONFIG_FILE, SUMMARY_FILE
from server_app.run_folder.run_status import flat_settings

ENGINES = ("simulation", "deployment", "inprocess")
#: What :func:`plan_run` decides for one (policy, seed).
RUN, KEEP, RESUME = "run", "keep", "resume"
#: Run-config keys a comparison or a preset sets itself, and what to give instead.
NOT_SETTABLE = {
    "seed": "give the seeds as seeds (--seeds 0,1,2, or seeds=[0,1,2] in a preset)",
    "policy": "list the policies (--policies, or policies=[fedcgd-fscd,bc] in a preset)",
    "result-dir": "every run goes to <out>/.../<policy>/seed-<s>: give --out (a preset: out=)",
    "resume-from": "runs stopped early are resumed by running the same command again",
}


def run_dir(out: Path, policy: str, seed: int) -> Path:
    """``<out>/<policy label>/seed-<seed>``: one (policy, seed)'s result folder."""
    return out / reference_label(policy) / f"seed-{seed}"


def check_policies(policies: list[str]) -> None:
    """Raise ValueError (one line) for no policy, a repeated one, or two sharing a folder."""
    if not policies:
        raise ValueError("policies: give at least one policy, e.g. policies=[fedcgd-fscd,bc]")
    if repeated := sorted({p for p in policies if policies.count(p) > 1}):
        raise ValueError(f"policies: {policies} repeats {', '.join(repeated)}; name each once")
    labels = [reference_label(p) for p in policies]
    if shared := sorted({p for p, a in zip(policies, labels, strict=True) if labels.count(a) > 1}):
        raise ValueError(
            f"policies: {', '.join(shared)} would share a result folder (same class name); "
            "give the classes different names"
        )


def _params_refusal(policy: str, shared: Mapping[str, Any]) -> str | None:
    """Why ``policy`` does not take every ``policy-params`` of ``shared``; None: it does."""
    from fedcgd_strategy.policies.registry import policy_param_arguments
    from server_app.config import read_params

    try:
        policy_param_arguments(policy, read_params(shared))
    except ValueError as err:
        return str(err)
    return None


def with_policy_params(policy: str, shared: Mapping[str, Any]) -> dict[str, Any]:
    """``shared`` for ``policy``: its ``policy-params`` kept only if the policy takes them all."""
    from server_app.config import PARAMS_KEY, PARAMS_PREFIX

    if _params_refusal(policy, shared) is None:
        return dict(shared)
    return {k: v for k, v in shared.items() if k != PARAMS_KEY and not k.startswith(PARAMS_PREFIX)}


def check_policy_params_used(policies: Sequence[str], shared: Mapping[str, Any]) -> None:
    """Raise ValueError (one line) when ``policy-params`` are given but no policy takes them."""
    from server_app.config import PARAMS_KEY, read_params

    if not (params := read_params(shared)):
        return
    refusals = [_params_refusal(policy, shared) for policy in policies]
    if None not in refusals:
        raise ValueError(
            f"run-config {PARAMS_KEY} {params}: none of the policies {', '.join(policies)} "
            "takes all of them" + "".join(f"; {why}" for why in refusals)
        )


def check_seeds(seeds: Sequence[Any] | str) -> list[int]:
    """The seeds (a list, or ``--seeds``' ``"0,1,2"``) as ints; ValueError (one line) if bad."""
    if isinstance(seeds, str):
        try:
            seeds = [int(x) for x in seeds.split(",") if x.strip()]
        except ValueError:
            raise ValueError(
                f"--seeds {seeds!r}: give comma-separated integers, e.g. 0,1,2"
            ) from None
    if not seeds:
        raise ValueError("seeds: give at least one seed, e.g. 0,1,2,3,4")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"seeds: {s!r} is not a non-negative integer")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: {list(seeds)} repeats a seed")
    return [int(s) for s in seeds]


def check_engine(engine: str, deployment: bool = False, option: str = "engine") -> str:
    """``engine`` (``deployment`` when that is true) if one of :data:`ENGINES`; else ValueError."""
    if engine not in ENGINES:
        raise ValueError(f"{option}: got {engine!r}; allowed: {', '.join(ENGINES)}")
    return "deployment" if deployment else engine


def check_comparison(
    policies: list[str], shared: Mapping[str, Any], seeds: Sequence[Any] | str
) -> list[int]:
    """The checked seeds; every (policy, seed)'s run config checked (ValueError: one line)."""
    check_policies(policies)
    if owned := [key for key in shared if key in NOT_SETTABLE]:
        raise ValueError(
            f"run-config key {owned[0]!r}: not settable here; {NOT_SETTABLE[owned[0]]}"
        )
    seeds = check_seeds(seeds)
    check_policy_params_used(policies, shared)
    for policy in policies:
        for seed in seeds:
            validated_run_config(
                {**with_policy_params(policy, shared), "policy": policy, "seed": seed}
            )
    return seeds


@dataclass(frozen=True)
class PlannedRun:
    """One (policy, seed): its folder, run-config overrides and :data:`RUN` / KEEP / RESUME."""

    policy: str
    seed: int
    result_dir: Path
    overrides: dict[str, Any]
    action: str

    @property
    def label(self) -> str:
        """``<policy label>/seed-<seed>``, as its folder."""
        return f"{reference_label(self.policy)}/seed-{self.seed}"


def plan_run(policy: str, seed: int, result_dir: Path, shared: Mapping[str, Any]) -> PlannedRun:
    """Keep a run with a ``summary.json`` (its files read), resume one with a checkpoint, else run.

    A kept run of other settings or with damaged files: ValueError (one line) before any start.
    """
    from server_app.checkpoint import settings_change
    from server_app.config import parse_run_config

    overrides = {**with_policy_params(policy, shared), "policy": policy, "seed": seed}
    overrides["result-dir"] = str(result_dir)
    if not (result_dir / SUMMARY_FILE).exists():
        if not (result_dir / CHECKPOINT_FILE).exists():
            return PlannedRun(policy, seed, result_dir, overrides, RUN)
        overrides["resume-from"] = str(result_dir)
        return PlannedRun(policy, seed, result_dir, overrides, RESUME)
    settings = parse_run_config(with_resolved_data_dir(validated_run_config(overrides))).to_dict()
    asked, ignore = flat_settings(settings), unread_settings(settings)
    kept = flat_settings(read_json_object(result_dir / CONFIG_FILE))
    if keys := sorted(k for k in asked if k not in ignore and kept.get(k) != asked[k]):
        raise ValueError(
            f"{result_dir}: {settings_change(kept, asked, keys)}; a kept run's settings may not "
            "change: give another output folder, or remove its runs to run them again"
        )
    summarise(result_dir)  # refused now if damaged; its row is read again at the end
    return PlannedRun(policy, seed, result_dir, overrides, KEEP)


def plan_runs(
    policies: Sequence[str], shared: Mapping[str, Any], out: Path, seeds: Iterable[int]
) -> list[PlannedRun]:
    """:func:`plan_run` for every (policy, seed), in the order they run."""
    return [plan_run(p, s, run_dir(out, p, s), shared) for p in policies for s in seeds]


def plan_points(
    policies: Sequence[str],
    variants: Sequence[tuple[str, Mapping[str, Any]]],
    seeds: Sequence[int],
    out: Path,
    claims: list[FolderClaim],
    option: str,
) -> list[tuple[str, list[PlannedRun]]]:
    """Each ``(label, settings)``'s runs planned in ``out/<label>`` (claimed: one command at a
    time), every run to start checked by ``preflight.check_before_start``."""  # noqa: D205, D209
    from experiments.run.preflight import check_before_start

    claims.append(claim_folder(out, option))
    points = []
    for label, shared in variants:
        if label:
            claims.append(claim_folder(out / label, option))
        points.append((label, plan_runs(policies, shared, out / label, seeds)))
    for plan in (p for _, plans in points for p in plans if p.action != KEEP):
        probe_free(plan.result_dir, f"{plan.label}: result folder")
        config = with_resolved_data_dir(validated_run_config(plan.overrides))
        if plan.action == RUN:  # its stopped files are removed before it starts
            config["result-dir"] = ""
        try:
            check_before_start(config)
        except (ValueError, FileNotFoundError) as err:
            raise type(err)(f"{plan.result_dir}: {err}") from err
    return points
