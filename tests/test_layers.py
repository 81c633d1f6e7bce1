"""The import layers of issue 51: app -> strategy -> channel -> task, no arrow up, no circle;
the strategy outside ``flower/`` and the channel import neither flwr nor torch."""

from __future__ import annotations

import ast
import pkgutil
from pathlib import Path

from subprocesses import assert_import_pulls_neither_flwr_nor_torch

import fedcgd_strategy

ROOT = Path(__file__).resolve().parents[1]
#: Each package, by layer from the bottom; a module imports only its own layer or lower ones.
LAYERS = ("fedcgd_config", "fedcgd_task", "channel", "fedcgd_strategy", "server_app")


def _imports(path: Path) -> set[str]:
    """Every project module ``path`` names in an import (also lazy and TYPE_CHECKING ones)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_config_and_the_task_import_no_higher_layer_and_have_no_circle() -> None:
    files = sorted(path for p in LAYERS[:2] for path in (ROOT / p).rglob("*.py"))
    modules = {_module(path): path for path in files}
    graph = {name: {m for m in _imports(path) if m in modules} for name, path in modules.items()}
    upward = {
        f"{name} -> {m}"
        for name, path in modules.items()
        for m in _imports(path)
        if m.partition(".")[0]
        in (*LAYERS[LAYERS.index(name.partition(".")[0]) + 1 :], "client_app", "experiments")
    }
    assert not upward
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        assert name not in trail, " -> ".join((*trail, name))
        if name in done:
            return
        for target in graph[name]:
            visit(target, (*trail, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_the_strategy_outside_flower_and_the_channel_import_neither_flwr_nor_torch() -> None:
    modules = [
        m.name
        for m in pkgutil.walk_packages(fedcgd_strategy.__path__, "fedcgd_strategy.")
        if not m.name.startswith("fedcgd_strategy.flower")
    ]
    pure = {"policies.registry", "nodes", "problem", "solvers.heuristics", "solvers.exact"}
    assert {f"fedcgd_strategy.{m}" for m in pure} <= set(modules) and len(modules) >= 15
    channel = ("channel", "channel.report", "channel.cell", "channel.bandwidth")
    config = ("fedcgd_config.settings", "fedcgd_config.keys", "fedcgd_config.imports")
    assert_import_pulls_neither_flwr_nor_torch(*modules, *channel, *config)
