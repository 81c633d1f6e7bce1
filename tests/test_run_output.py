"""What a run prints: one progress line per round; Flower's own lines only with ``verbose``."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from fake_grid import app_grid, make_contexts
from flwr.supercore.logger import FLOWER_LOGGER, ConsoleHandler, update_console_handler

from experiments.run.flwr_run import stream_output, strip_ansi
from experiments.run.inprocess import InProcessOptions, main
from fedcgd_config.settings import default_run_config
from server_app.app import run_federation
from server_app.config import parse_run_config


@pytest.mark.parametrize(("verbose", "fresh"), [(False, True), (True, False), (False, False)])
def test_flower_round_lines_only_when_verbose_and_a_bare_serverapp_names_its_folder(
    tmp_path: Path, verbose: bool, fresh: bool, capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:  # fmt: skip
    """Under a bare ``flwr run`` (no result-dir; here: ``fresh``) the ServerApp picks the
    folder itself and its first line names it; a command that chose the folder names it itself."""
    run_config = default_run_config()
    run_config.update({"num-devices": 4, "num-server-rounds": 2, "verbose": verbose})
    run_config["result-dir"] = str(tmp_path / "bc-20250101-000000")
    grid = app_grid(make_contexts([100 + i for i in range(4)], run_config, 4))
    level_before = FLOWER_LOGGER.level
    FLOWER_LOGGER.addHandler(caplog.handler)
    try:
        run_federation(grid, parse_run_config(run_config), fresh_name=fresh)
    finally:
        FLOWER_LOGGER.removeHandler(caplog.handler)
    info = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.INFO and r.name == FLOWER_LOGGER.name
    ]
    assert any("[ROUND 1/2]" in m for m in info) is verbose
    printed = capsys.readouterr().out.splitlines()
    named = [line for line in printed if "result folder" in line]
    assert named == ([f"result folder: {run_config['result-dir']}"] if fresh else [])
    assert not fresh or printed[0] == named[0]
    progress = [line for line in printed if line.startswith("round ")]
    assert [line.split("|")[0].split() for line in progress] == [["round", "1/2"], ["round", "2/2"]]
    assert all("ETA" in line and "elapsed" in line for line in progress)
    assert FLOWER_LOGGER.level == level_before  # restored after the run


#: Flower's and Ray's chatter (held back without ``verbose``), and lines a run shows.
CHATTER = (
    "Using SuperLink: local (127.0.0.1:44703)\n"
    "\x1b[92mINFO \x1b[0m:      Starting logstream for run_id `1`\n"
    "\x1b[93mWARNING \x1b[0m:   Since flwr 1.32, default simulated SuperNodes changed\n"
    "\x1b[92mINFO \x1b[0m:      \n"
    "Successfully installed fedcgd to /tmp/x.\n"
    "(ClientAppActor pid=1) WARNING :   Manually terminating ClientAppActor\n"
    "\x1b[92mINFO \x1b[0m:      Start `flwr-serverapp` process\n"
)
SHOWN = (
    "round    1/3 | acc 21.67% | scheduled   5/6   available | elapsed 7.1 s | ETA 14.2 s\n"
    "\x1b[93mWARNING \x1b[0m:   train: device 3 excluded this round: busy\n"
    "\x1b[91mERROR \x1b[0m:     Simulation raised an exception\n"
    "Traceback (most recent call last):\n"
)


def test_stream_output_prints_the_runs_lines_and_returns_every_line(capsys) -> None:
    text = CHATTER + SHOWN
    proc = subprocess.Popen(
        [sys.executable, "-c", f"print({text!r}, end='')"], stdout=subprocess.PIPE, text=True
    )
    assert stream_output(proc, verbose=False) == text  # what the commands read back
    assert capsys.readouterr().out == strip_ansi(SHOWN)  # colour codes only for a terminal


def test_the_in_process_engine_writes_flowers_log_lines_without_colour_codes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Flower's console handler colours every level; an in-process run's log file gets none."""
    (handler,) = [h for h in FLOWER_LOGGER.handlers if isinstance(h, ConsoleHandler)]
    record = logging.LogRecord("flwr", logging.WARNING, "", 0, "device 3 excluded", None, None)
    update_console_handler(colored=True)
    try:
        assert "\x1b[" in handler.format(record)  # Flower's default
        assert main(InProcessOptions(run_config="num-devices=0")) == 2  # refused, nothing ran
        assert capsys.readouterr().err.startswith("error: run-config key 'num-devices'")
        assert handler.format(record) == "WARNING :   device 3 excluded"
    finally:
        update_console_handler(colored=True)
