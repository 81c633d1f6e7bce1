"""Result folders as the ServerApp writes them, without running a federation.

``config.json`` is the resolved run config the way the ServerApp records it
(:func:`server_app.config.parse_run_config` of the defaults plus the overrides, with the data
folder made absolute, plus values derived at run time), ``metrics.jsonl`` one line per round,
``summary.json`` and ``status.json`` (:mod:`server_app.run_folder.run_status`).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from fedcgd_task.settings import default_run_config
from server_app.config import parse_run_config
from server_app.run_folder.run_status import COMPLETED, RunStatus, write_status


def recorded_config(overrides: Mapping[str, Any], result_dir: Path) -> dict[str, Any]:
    """``config.json`` of a run started with ``overrides`` into ``result_dir``."""
    data_dir = str(Path(str(overrides.get("data-dir", "")) or "data").resolve())
    merged = {**default_run_config(), **overrides, "data-dir": data_dir}
    merged["result-dir"] = str(result_dir)
    config = json.loads(json.dumps(parse_run_config(merged).to_dict()))
    config.update(num_parameters=4810, model_bits_used=4810 * 32, num_classes=10)
    return dict(config)


def write_run(
    result_dir: Path,
    overrides: Mapping[str, Any],
    lines: Sequence[Mapping[str, Any]],
    *,
    state: str = COMPLETED,
    reason: str | None = None,
    summary: bool = True,
) -> None:
    """Write a run's files: config, metrics lines, summary (optional) and status."""
    result_dir.mkdir(parents=True, exist_ok=True)
    config = recorded_config(overrides, result_dir)
    (result_dir / "config.json").write_text(json.dumps(config))
    (result_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    if summary:
        (result_dir / "summary.json").write_text(json.dumps({"policy": config["policy"]}))
    last = lines[-1]["round"] if lines else 0
    write_status(result_dir, RunStatus(state, last, config["num_server_rounds"], reason=reason))


def last_two_lines(capsys: Any, out: Path) -> tuple[str, str]:
    """The last two lines a comparison into ``out`` wrote to stderr (what failed, what next).

    Its first line on stdout must name ``out``.
    """
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == f"output folder: {out}"
    failed, last = captured.err.strip().splitlines()[-2:]
    return failed, last


RERUN = (
    "to go on, run the same command again (completed runs are kept, stopped ones continue "
    "from their checkpoints): "
)


def rerun_command(line: str, command: str = "compare") -> list[str]:
    """The options of the ``fedcgd <command>`` a last line gives (its script checked)."""
    from subprocesses import FEDCGD

    assert line.startswith(RERUN), line
    words = shlex.split(line.removeprefix(RERUN))
    assert Path(words[0]).resolve() == Path(FEDCGD).resolve(), words
    assert words[1] == command, words
    return words[2:]
