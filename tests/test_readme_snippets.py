"""Every Python snippet in the README and docs/ runs as written, and says what it returns."""

from __future__ import annotations

import re
import sys
import types
from typing import Any

import numpy as np
import pytest
from doc_pages import PROJECT, doc_text


def python_snippets() -> list[str]:
    """The bodies of the fenced ``python`` blocks of README.md and docs/, in order."""
    return re.findall(r"```python\n(.*?)```", doc_text(), flags=re.S)


def test_the_readme_has_python_snippets() -> None:
    assert len(python_snippets()) >= 2


@pytest.mark.parametrize("index", range(len(python_snippets())))
def test_snippet_runs_as_written(
    index: int, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    module = types.ModuleType(f"readme_snippet_{index}")  # as a file run as a module
    monkeypatch.setitem(sys.modules, module.__name__, module)
    code = compile(python_snippets()[index], f"docs python block {index}", "exec")
    exec(code, module.__dict__)


def test_scheduler_snippet_returns_what_the_text_says() -> None:
    snippet = next(s for s in python_snippets() if "solve(problem" in s)
    ns: dict[str, Any] = {}
    exec(compile(snippet, "docs scheduler block", "exec"), ns)
    result, problem = ns["result"], ns["problem"]
    selected = result.selected
    # "selected is a boolean mask over the V devices"
    assert selected.dtype == np.bool_ and selected.shape == (problem.num_devices,)
    assert result.num_selected == int(selected.sum()) > 0
    # "bandwidth_used_hz: Σ_v x_v B*_v (≤ B)", recomputed here from the problem's arrays
    used = float(problem.min_bandwidth_hz[selected].sum())
    assert result.bandwidth_used_hz == pytest.approx(used)
    assert used <= problem.total_bandwidth_hz
    # "wemd: Σ_c Ĝ_c |p̄_c − p_c|" with p̄ the mean label distribution of the scheduled devices
    p_bar = problem.label_dist[selected].mean(axis=0)
    gap = np.abs(p_bar - problem.target_dist)
    assert result.wemd == pytest.approx(float(problem.class_gradient @ gap))


def test_the_policy_example_in_the_readme_is_the_file() -> None:
    example = (PROJECT / "examples" / "proportional_fair.py").read_text(encoding="utf-8")
    assert example in python_snippets()
