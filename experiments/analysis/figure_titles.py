"""Figure titles from the runs' ``config.json``: data set, split, τ, V and the seeds.

A setting that differs between the runs lists its values (``τ = 1, 5``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from fedcgd_task.datasets import BUILTIN_DATASETS
from run_files.json_files import read_json_object
from run_files.results import CONFIG_FILE

#: Display names of the built-in data sets (a researcher's data set shows its function name).
DATASET_NAMES = {name: builtin.title for name, builtin in BUILTIN_DATASETS.items()}

#: Longest data-set name shown (a title stays one line whatever a config holds).
MAX_NAME = 40

#: Separator of the title's parts.
SEPARATOR = " · "


def read_config(result_dir: Path) -> dict[str, Any] | None:
    """The ``config.json`` of ``result_dir``; None when absent or unreadable (no title part)."""
    try:
        return read_json_object(result_dir / CONFIG_FILE)
    except (OSError, ValueError):
        return None


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, int | float) and not isinstance(value, bool) else "?"


def _values(parts: Iterable[str]) -> str:
    return ", ".join(dict.fromkeys(parts))


def dataset_text(config: Mapping[str, Any]) -> str:
    """``MNIST-1D``; a reference ``pkg.mod:my_data`` as ``my_data``."""
    name = str(_section(config, "task").get("dataset", "?"))
    return DATASET_NAMES.get(name, name.rsplit(":", 1)[-1])[:MAX_NAME]


def split_text(configs: Sequence[Mapping[str, Any]]) -> str:
    """The split of these runs: ``Dirichlet α = 0.1, 1`` or ``1 shard per device``, then ``r``."""
    tasks = [_section(c, "task") for c in configs]
    alphas = [_number(t.get("dirichlet_alpha")) for t in tasks if t.get("partition") != "shards"]
    shards = [t.get("shards_per_device") for t in tasks if t.get("partition") == "shards"]
    texts = []
    if alphas:
        texts.append("Dirichlet α = " + _values(alphas))
    if shards:
        plural = "" if all(n == 1 for n in shards) else "s"
        texts.append(_values(_number(n) for n in shards) + f" shard{plural} per device")
    text = ", ".join(texts)
    ratios = [t.get("imbalance_ratio", 1.0) for t in tasks]
    if any(r != 1.0 for r in ratios):
        text += ", r = " + _values(_number(r) for r in ratios)
    return text


def _section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    section = config.get(name)
    return section if isinstance(section, Mapping) else {}


def settings_title(configs: Sequence[Mapping[str, Any] | None], *, seeds: bool = True) -> str:
    """The title of a figure over runs with these ``config.json`` ("" when none is known).

    Data set · split · τ · V · aggregator (unless FedAvg) · seeds, each listing its distinct values
    in order; an unknown config is left out.
    """
    known = [c for c in configs if c and isinstance(c.get("task"), Mapping)]
    if not known:
        return ""
    parts = [
        _values(dataset_text(c) for c in known),
        split_text(known),
        "τ = " + _values(_number(_section(c, "training").get("local_steps")) for c in known),
        "V = " + _values(_number(_section(c, "task").get("num_devices")) for c in known),
    ]
    aggregators = [str(c.get("aggregator") or "") for c in known]
    if any(aggregators):
        parts.append("aggregator " + _values(a or "FedAvg" for a in aggregators))
    if seeds:
        distinct = list(dict.fromkeys(_number(_section(c, "task").get("seed")) for c in known))
        parts.append(f"seed {distinct[0]}" if len(distinct) == 1 else f"{len(distinct)} seeds")
    return SEPARATOR.join(parts)


def runs_title(result_dirs: Iterable[Path], *, seeds: bool = True) -> str:
    """:func:`settings_title` of the runs in ``result_dirs``."""
    return settings_title([read_config(d) for d in result_dirs], seeds=seeds)
