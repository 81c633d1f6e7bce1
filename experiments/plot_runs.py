"""Plot one or more runs from their result directories (reads ``metrics.jsonl`` only).

``python -m experiments.plot_runs RESULT_DIR [RESULT_DIR ...] --out curves.png`` draws, per
run, test accuracy, the number of scheduled devices and the WEMD of the schedule against the
round, labelled by each run's policy (from its ``config.json``).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from server_app.results import CONFIG_FILE, METRICS_FILE


def load_run(result_dir: Path) -> tuple[str, list[dict]]:
    """Return (label, per-round lines) of a result directory."""
    lines = [json.loads(x) for x in (result_dir / METRICS_FILE).read_text().splitlines() if x]
    config_path = result_dir / CONFIG_FILE
    label = result_dir.name
    if config_path.exists():
        label = str(json.loads(config_path.read_text()).get("policy", label))
    return label, lines


def plot_runs(result_dirs: list[Path], out: Path) -> Path:
    """Write a three-panel PNG (accuracy, scheduled devices, WEMD vs round) to ``out``."""
    fig, axes = plt.subplots(1, 3, figsize=(14, 4), constrained_layout=True)
    for result_dir in result_dirs:
        label, lines = load_run(result_dir)
        evaluated = [x for x in lines if x.get("accuracy") is not None]
        axes[0].plot(
            [x["round"] for x in evaluated], [x["accuracy"] for x in evaluated], label=label
        )
        axes[1].plot(
            [x["round"] for x in lines], [x.get("num_scheduled", 0) for x in lines], label=label
        )
        with_wemd = [x for x in lines if x.get("wemd") is not None]
        axes[2].plot([x["round"] for x in with_wemd], [x["wemd"] for x in with_wemd], label=label)
    for ax, title in zip(
        axes, ("test accuracy", "scheduled devices", "WEMD of the schedule (G = 1)"), strict=True
    ):
        ax.set_xlabel("round")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[0].legend()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("result_dirs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("results/curves.png"))
    args = parser.parse_args(argv)
    for d in args.result_dirs:
        if not (d / METRICS_FILE).exists():
            parser.error(f"{d} has no {METRICS_FILE}; is it a result directory?")
    print(f"wrote {plot_runs(args.result_dirs, args.out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
