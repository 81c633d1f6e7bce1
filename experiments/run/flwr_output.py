"""What ``flwr run --stream`` prints: the run's own lines shown, Flower's chatter held back."""

from __future__ import annotations

import re
import subprocess
import sys

#: Lines of ``flwr run --stream`` that say nothing about this run (Flower's and Ray's start-up
#: and shutdown notices); shown only with the run-config key ``verbose = true``.
FLOWER_CHATTER = (
    "Using SuperLink",
    "Successfully started run",
    "Starting logstream",
    "Starting Flower Simulation",
    "default simulated SuperNodes changed",
    "Federation `",
    "To change federation size",
    "flwr federation simulation-config",
    "Successfully installed",
    "Manually terminating ClientAppActor",
    "Ray will no longer override accelerator visible devices",
    "warnings.warn(",
    "Start `flwr-serverapp` process",
)

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(line: str) -> str:
    """``line`` without terminal colour codes (Flower colours its log levels)."""
    return _ANSI.sub("", line)


def is_chatter(line: str) -> bool:
    """True for a line of Flower's own start-up/shutdown notices (:data:`FLOWER_CHATTER`).

    Empty log lines (``INFO :`` and nothing else) count too. Warnings and errors about the
    run, tracebacks and the run's own lines are never chatter.
    """
    text = strip_ansi(line).strip()
    if text in ("", "INFO :"):
        return True
    return any(marker in text for marker in FLOWER_CHATTER)


def stream_output(proc: subprocess.Popen[str], *, verbose: bool = True) -> str:
    """Print a process's piped output line by line as it comes; return all of it.

    Without ``verbose`` Flower's start-up and shutdown notices (:func:`is_chatter`) are not
    printed; the returned text still holds every line. Flower's colour codes reach a terminal
    only: a file or pipe gets the lines without them.
    """
    lines = []
    assert proc.stdout is not None
    colours = sys.stdout.isatty()
    for line in proc.stdout:
        lines.append(line)
        if verbose or not is_chatter(line):
            print(line if colours else strip_ansi(line), end="", flush=True)
    proc.wait()
    return "".join(lines)
