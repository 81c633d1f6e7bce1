"""Every command in the README that takes run-config settings is valid as written.

The commands are extracted from README.md (code spans and code blocks, backslash continuations
joined) and their settings validated against the schema, without running a federation:
``make run RUN_CONFIG="…"`` and every ``--run-config "…"`` through the launcher's parser and
validator, ``python -m experiments.reproduce experiment=…`` through Hydra's composition and
the sweep planner.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from experiments.launcher import parse_run_config_text, validated_run_config
from experiments.reproduce import CONF_DIR, planned_runs

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_commands() -> list[str]:
    """Shell commands in the README (code blocks line by line, and inline code spans)."""
    text = README.read_text()
    commands: list[str] = []
    for block in re.findall(r"```(?:[a-z]*)\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        commands += [line.split("  #")[0].strip() for line in joined.splitlines() if line.strip()]
    commands += re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    return commands


def run_config_texts() -> list[str]:
    texts = []
    for command in readme_commands():
        texts += re.findall(r'RUN_CONFIG="([^"]*)"', command)
        texts += re.findall(r'--run-config "([^"]*)"', command)
    return [t for t in texts if "…" not in t and "..." not in t]


def reproduce_commands() -> list[list[str]]:
    out = []
    for command in readme_commands():
        if "experiments.reproduce" in command and "experiment=" in command:
            words = shlex.split(command)
            out.append(words[words.index("experiments.reproduce") + 1 :])
    return out


def test_the_readme_has_commands_to_check() -> None:
    assert len(run_config_texts()) >= 3
    assert any("channel." in t for t in run_config_texts())
    assert len(reproduce_commands()) >= 5


@pytest.mark.parametrize("text", run_config_texts())
def test_readme_run_config_is_valid(text: str) -> None:
    overrides = parse_run_config_text(text)
    assert overrides, text
    validated_run_config(overrides)


@pytest.mark.parametrize("words", reproduce_commands(), ids=lambda w: " ".join(w))
def test_readme_reproduce_command_composes_and_validates(words: list[str]) -> None:
    with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
        cfg = compose(config_name="config", overrides=words)
    assert planned_runs(cfg)


def test_dotted_channel_keys_are_accepted_and_bad_values_named() -> None:
    overrides = parse_run_config_text("channel.availability-prob=0.3 channel.deadline-s=2.0")
    assert overrides == {"channel.availability-prob": 0.3, "channel.deadline-s": 2.0}
    assert validated_run_config(overrides)["channel.deadline-s"] == 2.0
    with pytest.raises(ValueError, match=r"'learning-rate'.*-1"):
        validated_run_config(parse_run_config_text("learning-rate=-1"))
    with pytest.raises(ValueError, match="unknown run-config key"):
        validated_run_config(parse_run_config_text("chanel.deadline-s=2.0"))
