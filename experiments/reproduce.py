"""Reproduce a table or figure of the paper from a Hydra preset in ``conf/experiment/``.

``python -m experiments.reproduce experiment=<name>`` runs every policy of the preset for every
combination of its sweep (e.g. ``local-steps: [1, 5]``) with ``flwr run``, then writes, under
``out`` (default ``results/<name>``):

- ``<key>=<value>/<policy>/`` one result directory per run (resumable: finished runs are kept),
- ``<key>=<value>/table.csv`` and ``curves.png`` per sweep point,
- ``table.csv`` over all sweep points (final / best accuracy, rounds to the target accuracy,
  mean scheduled devices, mean WEMD: the paper's Table II columns and figure values),
- ``estimates.png``: σ̂ and Ĝ per round of every run (the paper's CIFAR-100 panels).

Presets: ``digits_policies`` (offline), ``cifar10_local_steps`` (accuracy vs τ and Table II),
``cifar10_imbalance``, ``cifar10_dirichlet``, ``cifar100_local_steps``. Any value can be
overridden, e.g. ``run.data-dir=/data/cifar 'policies=[fedcgd-fscd,bc]' run.num-server-rounds=50``.
The run config of every run is validated before the first one starts.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import matplotlib
from omegaconf import DictConfig, OmegaConf

from experiments.compare_policies import TABLE_COLUMNS, check_policies, run_policies, write_table
from experiments.launcher import default_run_config
from experiments.plot_runs import load_run
from server_app.config import parse_run_config
from task.datasets import load_dataset

matplotlib.use("Agg")
import matplotlib.pyplot as plt

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def sweep_points(sweep: Mapping[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the sweep values (one empty dict for no sweep)."""
    keys = list(sweep)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*sweep.values())]


def point_label(point: Mapping[str, Any]) -> str:
    """Folder name of a sweep point, e.g. ``local-steps=5`` (``default`` for no sweep)."""
    return ",".join(f"{k}={v}" for k, v in point.items()) or "default"


def planned_runs(cfg: DictConfig) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(sweep point, run-config overrides) of every sweep point, validated before any run.

    Raises
    ------
    ValueError
        For an unknown policy, an unknown run-config key or a bad value (naming the key).
    """
    policies = list(cfg.policies)
    check_policies(policies)
    defaults = default_run_config()
    shared = OmegaConf.to_container(cfg.run, resolve=True)
    sweep = OmegaConf.to_container(cfg.sweep, resolve=True)
    assert isinstance(shared, dict) and isinstance(sweep, dict)
    unknown = sorted((set(shared) | set(sweep)) - set(defaults))
    if unknown:
        raise ValueError(f"run-config keys {unknown} do not exist; allowed: {sorted(defaults)}")
    data_dir = str(Path(str(shared.get("data-dir", "")) or "data").expanduser().resolve())
    plans = []
    for point in sweep_points({str(k): list(v) for k, v in sweep.items()}):
        overrides = {**shared, **point, "data-dir": data_dir}
        for policy in policies:
            parse_run_config({**defaults, **overrides, "policy": policy, "result-dir": "/"})
        plans.append((point, overrides))
    return plans


def check_data(plans: list[tuple[dict[str, Any], dict[str, Any]]]) -> None:
    """Load each dataset the plan needs once, so missing files stop the sweep before any run.

    Raises
    ------
    FileNotFoundError
        Naming the folder and how to provide the files (CIFAR offline).
    """
    defaults = default_run_config()
    for dataset, data_dir in {
        (o.get("dataset", defaults["dataset"]), o["data-dir"]) for _, o in plans
    }:
        load_dataset(str(dataset), str(data_dir), train=True)


def plot_estimates(result_dirs: list[Path], out: Path) -> Path:
    """σ̂ and Ĝ used per round for each run (the paper's CIFAR-100 estimate panels)."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    for result_dir in result_dirs:
        policy, lines = load_run(result_dir)
        label = f"{result_dir.parent.name} {policy}"
        rounds = [x["round"] for x in lines]
        axes[0].plot(rounds, [x.get("sigma") for x in lines], label=label)
        g = [x.get("class_gradient_used") for x in lines]
        if all(isinstance(v, int | float) for v in g):
            axes[1].plot(rounds, g, label=label)
    axes[0].set_title("estimated σ (eq. global_est_sigma)")
    axes[1].set_title("Ĝ used by FedCGD (eq. G_est)")
    for ax in axes:
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


@hydra.main(config_path=CONF_DIR, config_name="config", version_base=None)
def main(cfg: DictConfig) -> None:
    """Run a preset (see the module docstring)."""
    try:
        plans = planned_runs(cfg)
        check_data(plans)
    except (ValueError, FileNotFoundError) as err:  # one line, before anything starts
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
    out = Path(str(cfg.out)).resolve()
    print(f"{cfg.name}: {cfg.description}")
    print(f"{len(plans)} sweep point(s) × {len(cfg.policies)} policies -> {out}", flush=True)
    all_rows: list[dict[str, Any]] = []
    run_dirs: list[Path] = []
    for k, (point, overrides) in enumerate(plans, start=1):
        label = point_label(point)
        rows = run_policies(
            list(cfg.policies),
            overrides,
            out / label,
            target_accuracy=cfg.get("target_accuracy"),
            num_supernodes=cfg.launcher.num_supernodes,
            deployment=bool(cfg.launcher.deployment),
            cpus_per_client=int(cfg.launcher.cpus_per_client),
            gpus_per_client=float(cfg.launcher.gpus_per_client),
            progress=f"[{label} {k}/{len(plans)}] ",
        )
        all_rows += [{"sweep": label, **row} for row in rows]
        run_dirs += [out / label / row["policy"] for row in rows]
    if all_rows:
        write_table(all_rows, out / "table.csv", extra_columns=("sweep",))
        plot_estimates(run_dirs, out / "estimates.png")
    print(f"wrote {out / 'table.csv'} ({len(all_rows)} runs; columns {TABLE_COLUMNS})")


if __name__ == "__main__":
    main()
