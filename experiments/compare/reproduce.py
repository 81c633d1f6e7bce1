"""``fedcgd reproduce experiment=<name> [overrides]``: a preset of ``conf/experiment/``."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from experiments.analysis.plot_runs import plot_sweep, point_label, runs_title
from experiments.compare.execution import launch_settings, run_points
from experiments.compare.plans import check_comparison, check_engine, check_seeds, plan_points
from experiments.compare.policies import run_command
from experiments.compare.results import METRICS, write_comparison
from experiments.run.resume_command import fedcgd_command
from fedcgd_config.schema import flatten
from fedcgd_config.settings import resolve_data_dir
from fedcgd_strategy.policies.registry import canonical_policy
from server_app.config import fold_policy_params
from server_app.run_folder.files import atomic_write
from server_app.run_folder.folder_lock import FolderClaim

CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")


def sweep_points(sweep: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep values (one empty dict for no sweep)."""
    keys = list(sweep)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*sweep.values())]


def planned_seeds(cfg: DictConfig) -> list[int]:
    """The config's ``seeds`` (default ``[0]``; an integer is one seed); ValueError if bad."""
    seeds = cfg.get("seeds", [0])
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        return check_seeds([seeds])
    if not OmegaConf.is_list(seeds):
        raise ValueError(f"seeds: {seeds!r} is not a list of integers, e.g. seeds=[0,1,2]")
    return check_seeds(list(seeds))


def run_keys(node: Any) -> dict[str, Any]:
    """A ``run`` or ``sweep`` node as flat run-config keys (nested command-line keys win)."""
    table = OmegaConf.to_container(node, resolve=True)
    assert isinstance(table, dict)
    flat = {str(k): v for k, v in table.items() if not isinstance(v, dict)}
    flat.update(flatten({str(k): v for k, v in table.items() if isinstance(v, dict)}))
    return flat


def planned_runs(cfg: DictConfig) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(sweep point, run-config overrides) of every point, validated (ValueError: one line)."""
    seeds = planned_seeds(cfg)
    shared, sweep = run_keys(cfg.run), run_keys(cfg.sweep)
    if swept := sorted(set(shared) & set(sweep)):
        raise ValueError(
            f"run.{swept[0]}: this preset sweeps it; set its values with "
            f"sweep.{swept[0]}=[...] instead"
        )
    data_dir = str(resolve_data_dir(str(shared.get("data-dir", ""))))
    plans = []
    for point in sweep_points({str(k): list(v) for k, v in sweep.items()}):
        overrides = fold_policy_params({**shared, **point, "data-dir": data_dir})
        check_comparison(list(cfg.policies), overrides, seeds)
        plans.append((point, overrides))
    return plans


def check_figure_metrics(metrics: Any) -> None:
    """Refuse a ``figure_metrics`` that names anything but the table's :data:`METRICS`."""
    given = [] if metrics is None else list(metrics) if not isinstance(metrics, str) else [metrics]
    if bad := [m for m in given if m not in METRICS]:
        allowed = ", ".join(METRICS)
        raise ValueError(f"figure_metrics = {given!r} names {bad[0]!r}; allowed: {allowed}")


def load_preset(words: Sequence[str]) -> DictConfig:
    """The config the command-line overrides ``words`` compose; ValueError (one line) if bad."""
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose("config", overrides=hydra_overrides(words))
        OmegaConf.to_container(cfg, resolve=True)  # every ${...} before anything starts
        if OmegaConf.is_list(cfg.get("policies")):  # a label names its policy too
            cfg.policies = [canonical_policy(p) for p in cfg.policies]
    except (HydraException, OmegaConfBaseException) as err:
        message = " ".join(str(err).split())  # with the key (full_key: ...) where it has one
        raise ValueError(f"{message} (overrides: {' '.join(words)})") from err
    for key, is_kind, allowed in (
        ("policies", OmegaConf.is_list, "a list of policies, e.g. 'policies=[bc,fedcgd-fscd]'"),
        ("run", OmegaConf.is_dict, "run-config keys and values, e.g. run.num-server-rounds=10"),
        ("sweep", OmegaConf.is_dict, "keys and their lists, e.g. 'sweep.local-steps=[1,5]'"),
    ):
        if key in cfg and not is_kind(cfg[key]):
            raise ValueError(
                f"{key} = {cfg[key]!r} (overrides: {' '.join(words)}); allowed: {allowed}"
            )
    base = OmegaConf.to_container(OmegaConf.load(Path(CONF_DIR) / "config.yaml"))
    assert isinstance(base, dict)
    if removed := removed_key({**base, **dict.fromkeys(PRESET_KEYS)}, cfg):
        raise ValueError(
            f"{removed}: removed by the overrides ({' '.join(words)}); the preset needs it, "
            f"set its value instead (e.g. {removed}=...)"
        )
    return cfg


#: Keys every preset of conf/experiment/ sets (conf/config.yaml sets the others).
PRESET_KEYS = ("name", "description", "policies", "sweep", "run")


def removed_key(needed: Mapping[Any, Any], cfg: Any, prefix: str = "") -> str | None:
    """The first key of ``needed`` (nested dicts: their keys too) that ``cfg`` lacks; None: none."""
    for key, value in needed.items():
        if key == "defaults":
            continue
        if key not in cfg:
            return f"{prefix}{key}"
        if isinstance(value, dict) and (found := removed_key(value, cfg[key], f"{prefix}{key}.")):
            return found
    return None


def main(words: Sequence[str]) -> int:
    """``fedcgd reproduce [KEY=VALUE ...]``: run a preset; exit code 0, 1, 2 or 130 / 143."""
    try:
        cfg = load_preset(words)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return reproduce(cfg, fedcgd_command(["reproduce", *words]))


def reproduce(cfg: DictConfig, command: str | None = None) -> int:
    """Plan and check every run, run them, write the tables and figures; the exit code."""
    out = Path(str(cfg.out)).resolve()
    launcher = cfg.launcher

    def check(claims: list[FolderClaim]) -> Callable[[], int]:
        engine = check_engine(
            str(launcher.get("engine", "simulation")), bool(launcher.get("deployment")),
            "launcher.engine",
        )  # fmt: skip
        plans = planned_runs(cfg)
        check_figure_metrics(cfg.get("figure_metrics"))
        variants = [(point_label(point), overrides) for point, overrides in plans]
        points = plan_points(list(cfg.policies), variants, planned_seeds(cfg), out, claims, "out")
        ray = (
            launcher.get("ray-address"), launcher.get("cpus-per-run", 1.0),
            launcher.get("gpus-per-run", 0.0),
        )  # fmt: skip
        how = launch_settings(
            engine, launcher.get("jobs", 1), ray, "launcher.",
            num_supernodes=launcher.num_supernodes, cpus_per_client=int(launcher.cpus_per_client),
            gpus_per_client=float(launcher.gpus_per_client),
        )  # fmt: skip

        def go() -> int:
            # The preset as composed, the command first (which settings it set or changed).
            head = f"# {command}\n" if command else ""
            atomic_write(out / "preset.yaml", head + OmegaConf.to_yaml(cfg, resolve=True))
            print(f"{cfg.name}: {cfg.description}")
            print(
                f"{len(points)} sweep point(s) × {len(cfg.policies)} policies × "
                f"{len(planned_seeds(cfg))} seed(s) -> {out} ("
                f"{engine if how.ray is None else 'Ray tasks of the inprocess'} engine, {how.jobs} "
                "run(s) at once)",
                flush=True,
            )
            total = run_points(points, out, how, cfg.get("target_accuracy"))
            if runs := total.runs:  # the tables over every sweep point, and the figures
                rows = write_comparison(runs, out, cfg.get("target_accuracy"), by_sweep=True)
                sweep = {k: list(v) for k, v in run_keys(cfg.sweep).items()}
                title = runs_title(Path(run["result_dir"]) for run in runs)
                metrics = list(cfg.get("figure_metrics") or [])
                if figure := plot_sweep(rows, sweep, metrics, out / "sweep.png", title):
                    print(f"wrote {figure}")
            return total.report()

        return go

    return run_command(check, out, command)


#: Config nodes whose keys are run-config keys (any of them, listed in the preset or not).
OPEN_NODES = ("run.", "sweep.")


def hydra_overrides(args: Sequence[str]) -> list[str]:
    """``run.KEY=V`` / ``sweep.KEY=V`` made ``++run.KEY=V``: any run-config key may be set."""
    return [f"++{a}" if a.startswith(OPEN_NODES) and "=" in a else a for a in args]
