"""Planning a comparison: its settings checked, and each (policy, seed) decided from its folder.

Keep, resume or run each ``<out>/<policy>/seed-<s>`` (docs/comparing.md, "Kept runs").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.run.ray_runs import resolve_jobs
from experiments.run.run_config import validated_run_config, with_resolved_data_dir
from fedcgd_task.settings import unread_settings
from server_app.run_folder.files import read_json_object
from server_app.run_folder.results import CONFIG_FILE, SUMMARY_FILE
from server_app.run_folder.run_status import (
    SETTINGS_ADDED_LATER,
    first_line,
    flat_settings,
    settings_differences,
)


def run_dir(out: Path, policy: str, seed: int) -> Path:
    """Result directory of one (policy, seed): ``<out>/<label>/seed-<seed>`` (label: its name)."""
    from fedcgd_task.imports import reference_label

    return out / reference_label(policy) / f"seed-{seed}"


def check_policies(policies: list[str]) -> None:
    """Raise ValueError (one line) for a policy that cannot be built or a repeated folder name."""
    from fedcgd_strategy.policies.registry import policy_class
    from fedcgd_task.imports import reference_label

    if not policies:
        raise ValueError("policies: give at least one policy, e.g. policies=[fedcgd-fscd,bc]")
    for policy in policies:
        try:
            policy_class(policy)
        except ValueError as err:
            raise ValueError(f"policies: {err}") from None
    repeated = sorted({p for p in policies if policies.count(p) > 1})
    if repeated:
        raise ValueError(f"policies: {policies} repeats {', '.join(repeated)}; name each once")
    labels = [reference_label(p) for p in policies]
    clashing = sorted(
        {p for p, label in zip(policies, labels, strict=True) if labels.count(label) > 1}
    )
    if clashing:
        raise ValueError(
            f"policies: {', '.join(clashing)} would share a result folder (same class name); "
            "give the classes different names"
        )


def takes_policy_params(policy: str, shared: Mapping[str, Any]) -> bool:
    """Whether ``policy`` takes every ``policy-params`` name of ``shared`` (False without any)."""
    from fedcgd_strategy.policies.registry import policy_param_arguments
    from server_app.config import read_params

    params = read_params(shared)
    if not params:
        return False
    try:
        policy_param_arguments(policy, params)
    except ValueError:
        return False
    return True


def with_policy_params(policy: str, shared: Mapping[str, Any]) -> dict[str, Any]:
    """``shared`` for ``policy``: its ``policy-params`` kept only if the policy takes them all."""
    from server_app.config import PARAMS_KEY, PARAMS_PREFIX

    if takes_policy_params(policy, shared):
        return dict(shared)
    return {k: v for k, v in shared.items() if k != PARAMS_KEY and not k.startswith(PARAMS_PREFIX)}


def check_policy_params_used(policies: Sequence[str], shared: Mapping[str, Any]) -> None:
    """Raise ValueError (one line) when ``policy-params`` are given but no policy takes them."""
    from server_app.config import PARAMS_KEY, read_params

    params = read_params(shared)
    if params and not any(takes_policy_params(p, shared) for p in policies):
        raise ValueError(
            f"run-config {PARAMS_KEY} {params}: none of the policies {', '.join(policies)} "
            "takes all of them"
        )


def check_seeds(seeds: Sequence[Any]) -> list[int]:
    """The seeds as ints; ValueError for none, a non-integer, a negative one or a repeat."""
    if not seeds:
        raise ValueError("seeds: give at least one seed, e.g. 0,1,2,3,4")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"seeds: {s!r} is not a non-negative integer")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds: {list(seeds)} repeats a seed")
    return [int(s) for s in seeds]


def parse_seeds(text: str) -> list[int]:
    """``"0,1,2"`` → ``[0, 1, 2]`` (checked as in :func:`check_seeds`)."""
    items = [x.strip() for x in text.split(",") if x.strip()]
    try:
        return check_seeds([int(x) for x in items])
    except ValueError as err:
        if str(err).startswith("seeds:"):
            raise
        raise ValueError(f"--seeds {text!r}: give comma-separated integers, e.g. 0,1,2") from None


#: Engines a comparison's runs can run on.
ENGINES = ("simulation", "deployment", "inprocess")


def check_engine(engine: str, deployment: bool = False, option: str = "engine") -> str:
    """``engine`` (``deployment`` when that is true) if one of :data:`ENGINES`; else ValueError."""
    if engine not in ENGINES:
        raise ValueError(f"{option}: got {engine!r}; allowed: {', '.join(ENGINES)}")
    return "deployment" if deployment else engine


def check_comparison(
    policies: list[str], shared: Mapping[str, Any], seeds: Sequence[int], engine: str, jobs: int
) -> tuple[list[int], int]:
    """The checked seeds and jobs of a comparison, or ValueError (one line) before any run.

    Refused: an unknown policy, bad ``jobs``, ``seed`` (give the seeds), ``result-dir`` or
    ``resume-from`` in ``shared``, a bad seed list, a bad run config (:func:`check_run_configs`).
    """
    check_policies(policies)
    jobs = resolve_jobs(jobs, engine)
    if "seed" in shared:
        raise ValueError("give the seeds as seeds (--seeds 0,1,2), not as run-config 'seed'")
    for key in ("result-dir", "resume-from"):
        if shared.get(key):
            raise ValueError(
                f"run-config key {key!r}: a comparison puts each run in "
                "<out>/<policy>/seed-<s> (give --out) and resumes kept runs itself"
            )
    seeds = check_seeds(list(seeds))
    check_run_configs(policies, shared, seeds)
    return seeds, jobs


def check_run_configs(
    policies: Sequence[str], shared: Mapping[str, Any], seeds: Sequence[int]
) -> None:
    """Check each policy's run config (with the ``policy-params`` it takes) for each seed."""
    check_policy_params_used(policies, shared)
    for policy in policies:
        own = with_policy_params(policy, shared)
        for seed in seeds:
            validated_run_config({**own, "policy": policy, "seed": seed})


#: What :func:`plan_run` decides for one (policy, seed).
RUN, KEEP, RESUME = "run", "keep", "resume"


@dataclass(frozen=True)
class PlannedRun:
    """One (policy, seed) of a comparison and what to do with its result folder.

    ``overrides`` are the run's run-config overrides (``result-dir``, ``resume-from`` to resume);
    ``action`` is :data:`RUN`, :data:`KEEP` or :data:`RESUME`.
    """

    policy: str
    seed: int
    result_dir: Path
    overrides: dict[str, Any]
    action: str

    @property
    def label(self) -> str:
        """``<policy label>/seed-<seed>``: as its folder (a reference by its class name)."""
        from fedcgd_task.imports import reference_label

        return f"{reference_label(self.policy)}/seed-{self.seed}"


def plan_run(policy: str, seed: int, result_dir: Path, shared: Mapping[str, Any]) -> PlannedRun:
    """Keep a run with a ``summary.json``, resume one with a ``checkpoint.pt``, else run it.

    Raises
    ------
    ValueError
        One line: a kept or resumed run whose ``config.json`` holds other settings (only
        :func:`fedcgd_task.settings.unread_settings` may differ) or cannot be read; a kept
        run whose metrics lack rounds its summary says ran.
    """
    from server_app.checkpoint import CHECKPOINT_FILE
    from server_app.config import parse_run_config

    own = with_policy_params(policy, shared)
    overrides = {**own, "policy": policy, "seed": seed, "result-dir": str(result_dir)}
    kept = (result_dir / SUMMARY_FILE).exists()
    if not kept and not (result_dir / CHECKPOINT_FILE).exists():
        return PlannedRun(policy, seed, result_dir, overrides, RUN)
    config = with_resolved_data_dir(validated_run_config(overrides))
    requested = json.loads(json.dumps(parse_run_config(config).to_dict()))
    try:
        recorded = read_json_object(result_dir / CONFIG_FILE)
    except (OSError, ValueError) as err:
        raise ValueError(f"{result_dir}: {first_line(err)}; remove it to run it again") from None
    keys = settings_differences(
        recorded, requested, ignore=unread_settings(requested), requested_keys_only=True
    )
    if keys:
        before, now = {**SETTINGS_ADDED_LATER, **flat_settings(recorded)}, flat_settings(requested)
        differ = ", ".join(f"{k} (kept {before.get(k)!r}, asked {now.get(k)!r})" for k in keys)
        raise ValueError(
            f"{result_dir}: {differ}; a kept run's settings may not change: give another "
            "output folder, or remove its runs to run them again with these settings"
        )
    if kept:  # its row is read now: a damaged run is refused before anything starts
        from experiments.compare.results import summarise

        summarise(result_dir)
    resume = {} if kept else {"resume-from": str(result_dir)}
    return PlannedRun(policy, seed, result_dir, {**overrides, **resume}, KEEP if kept else RESUME)


def plan_runs(
    policies: Sequence[str], shared: Mapping[str, Any], out: Path, seeds: Sequence[int]
) -> list[PlannedRun]:
    """:func:`plan_run` for every (policy, seed), in the order they run."""
    return [plan_run(p, s, run_dir(out, p, s), shared) for p in policies for s in seeds]


def check_plans_before_start(plans: Sequence[PlannedRun]) -> None:
    """:func:`~experiments.run.preflight.check_before_start` for every run that will start."""
    from experiments.run.preflight import check_before_start
    from server_app.run_folder.folder_lock import probe_free

    for plan in plans:
        if plan.action == KEEP:
            continue
        probe_free(plan.result_dir, f"{plan.label}: result folder")  # in use: named
        config = with_resolved_data_dir(validated_run_config(plan.overrides))
        if plan.action == RUN:  # its stopped files are removed before it starts
            config["result-dir"] = ""
        try:
            check_before_start(config)
        except (ValueError, FileNotFoundError) as err:
            raise type(err)(f"{plan.result_dir}: {err}") from err
