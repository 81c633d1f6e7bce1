"""Any path a user can type: spaces, both quotes, backslashes, non-ASCII and non-BMP characters.

Every string goes from a dict to ``--run-config`` text, a TOML file and a POSIX shell and back
unchanged; such folders are run by test_resume_command (stopped, continued in ``bash``),
test_flwr_run and a preset here. Refused: a control character or a lone surrogate in a path.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args
from run_results import lines, two_policy_preset
from subprocesses import FEDCGD, run_ok

from experiments.cli import invoke
from experiments.run.run_config import (
    format_run_config,
    parse_run_config_text,
    run_config_file,
    run_config_toml,
    split_run_config_text,
    validated_run_config,
)
from fedcgd_config.schema import flatten
from server_app.config import fold_policy_params, read_params

#: A folder name with a space, both quotes, a backslash, non-ASCII and non-BMP characters.
HOSTILE_NAME = "a b 'q' \"dq\" back\\slash ü 😀"

#: Strings a run config must carry unchanged (values of string keys and table entries).
NASTY = [
    "", " ", "a b", "  two  spaces  ", "it's", 'say "hi"', "both ' and \"", "back\\slash",
    "trailing backslash\\", '\\"', "\\u0041 is not A", "'''", '"""', "'", '"', "#not a comment",
    "a=b c=d", "key = 'value'", "{window = 20}", "[1, 2]", "} ] { [", "$HOME `id` $(id) ; | & > <",
    "*?[a-z]~", "ünïcødé", "日本語のパス", "😀 emoji", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math", "\u200b zero width \ufeff",
    "new\nline", "tab\there", "\r\n", "nul\x00byte", "\x7f delete", HOSTILE_NAME,
]  # fmt: skip


def bash_words(command: str) -> list[str]:
    """The words ``bash`` makes of ``command`` (as a user pasting it would get)."""
    proc = subprocess.run(
        ["bash", "-c", f"printf '%s\\0' {command}"],
        capture_output=True,
        check=True,
        timeout=30,
    )
    return proc.stdout.decode("utf-8").split("\0")[:-1]


@pytest.mark.parametrize("text", NASTY, ids=range(len(NASTY)))
def test_every_string_round_trips_through_run_config_text_toml_file_and_shell(text, tmp_path):
    values = {
        "policy": text, "result-dir": text, "channel.trace": text, "policy-params.note": text,
        "policy-params.notes": [text, "x"], "aggregator-params.strategy-params.name": text,
        "num-devices": 3, "learning-rate": 0.5, "verbose": True,
    }  # fmt: skip
    folded = fold_policy_params(values)
    line = format_run_config(values)
    assert "\n" not in line  # one line: a printed command stays on its line
    assert parse_run_config_text(line) == folded
    assert read_params(parse_run_config_text(line)) == {"note": text, "notes": [text, "x"]}
    assert read_params(parse_run_config_text(line), "aggregator-params") == {
        "strategy-params": {"name": text}
    }
    # the same text as one word of a command, through bash and back
    assert bash_words(shlex.join(["--run-config", line])) == ["--run-config", line]
    # the TOML file `flwr run` gets: read by tomllib and by Flower's own parser
    assert flatten(tomllib.loads(run_config_toml(values))) == folded
    with run_config_file(values) as path:
        assert parse_config_args([str(path)]) == folded


LONE_SURROGATE = "name\udcff"  # a file name that is not UTF-8 (surrogateescape)


@pytest.mark.parametrize(
    ("write", "values", "message"),
    [
        (format_run_config, {"result-dir": LONE_SURROGATE}, r"cannot write .* as a TOML value"),
        (format_run_config, {"policy-params.x": LONE_SURROGATE}, "cannot write .* as a TOML"),
        (run_config_toml, {"policy-params.x": None}, "cannot write None"),
        (run_config_toml, {"x": 1, "x.y": 2},
         r"^run-config key 'x\.y': 'x' is set to a value, not a table$"),
        (run_config_toml, {"x.y": 2, "x": 1}, r"^run-config key 'x' is given twice; give it once$"),
        (run_config_toml, {"policy-params.a": 1, "policy-params.a.b": 2},
         r"^run-config key 'policy-params\.a\.b': 'a' is set to a value, not a table$"),
        (parse_run_config_text, "result-dir='/a b", "is not key=value with a TOML value"),
        (parse_run_config_text, 'result-dir="/a b', "is not key=value with a TOML value"),
        (parse_run_config_text, "policy=bc", "is not key=value with a TOML value"),
        (parse_run_config_text, "num-devices=3 #seed=1", "'#seed=1' sets no key"),
        (parse_run_config_text, "seed=1 seed=2", "'seed' is given twice"),
    ],
)  # fmt: skip
def test_a_run_config_toml_cannot_hold_or_bad_text_is_refused_in_one_line(write, values, message):
    with pytest.raises(ValueError, match=message) as err:
        write(values)
    assert "\n" not in str(err.value)


#: The example policy of README and docs/bring-your-own.md (its parameter: ``window``).
PF = "examples.proportional_fair:ProportionalFair"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # docs/running.md: policy-params is "a TOML inline table in a string"
        ('policy-params="{window = 20}"', {"window": 20}),
        ("policy-params='{window = 12.5}'", {"window": 12.5}),
        # the same table written as TOML, and the flat form of README / bring-your-own.md
        ("policy-params={window = 20}", {"window": 20}),
        ("policy-params.window=10", {"window": 10}),
    ],
)
def test_the_documented_policy_params_forms_are_read(text, expected):
    parsed = parse_run_config_text(f"policy='{PF}' {text} num-server-rounds=3")
    assert parsed["policy"] == PF and parsed["num-server-rounds"] == 3
    assert read_params(parsed) == expected
    folded = validated_run_config(parsed)  # checked against the constructor, passed on
    assert read_params(folded) == expected
    assert read_params(parse_run_config_text(format_run_config(folded))) == expected


def test_the_documented_aggregator_params_and_flowers_string_form_are_read():
    """docs/aggregation.md and docs/running.md; ``flwr run --run-config
    'policy-params="{window = 20}"'`` (docs/running.md) reaches the ServerApp as that string."""
    text = (
        "aggregator='DifferentialPrivacyServerSideAdaptiveClipping' "
        "aggregator-params.noise-multiplier=0.3 aggregator-params.strategy='FedTrimmedAvg' "
        "aggregator-params.strategy-params.beta=0.2 num-server-rounds=3"
    )
    expected = {"noise-multiplier": 0.3, "strategy": "FedTrimmedAvg"}
    expected["strategy-params"] = {"beta": 0.2}
    assert read_params(parse_run_config_text(text), "aggregator-params") == expected
    quoted = 'aggregator-params="{noise-multiplier = 0.3, strategy-params = {beta = 0.2}}"'
    del expected["strategy"]
    assert read_params(parse_run_config_text(quoted), "aggregator-params") == expected
    parsed = parse_config_args(['policy-params="{window = 20}" num-server-rounds=3'])
    assert read_params(parsed) == {"window": 20}


@pytest.mark.parametrize(
    ("text", "items"),
    [
        ("a=1 b=2", ["a=1", "b=2"]),
        ("  a=1\t\nb=2  ", ["a=1", "b=2"]),
        ("a='x y' b=\"p q\"", ["a='x y'", 'b="p q"']),
        ('a="it\'s \\" b=2" c=3', ['a="it\'s \\" b=2"', "c=3"]),
        ("a='''x ' y''' b=1", ["a='''x ' y'''", "b=1"]),
        ('a="""x "" y""""" b=1', ['a="""x "" y"""""', "b=1"]),
        ("t={x = [1, 2], y = 'a b'} z=1", ["t={x = [1, 2], y = 'a b'}", "z=1"]),
        ("a = 1 b =[2] c='x'", ["a = 1", "b =[2]", "c='x'"]),  # TOML's spaces around '='
    ],
)
def test_items_end_at_whitespace_outside_strings_arrays_and_tables(text, items):
    assert split_run_config_text(text) == items


def not_utf8(folder: Path) -> str:
    """A path under ``folder`` whose last name is not UTF-8, as Python decodes it."""
    return os.fsdecode(os.fsencode(folder) + b"/out\xff")


@pytest.mark.parametrize("key", ["result-dir", "resume-from", "data-dir"])
@pytest.mark.parametrize(
    "name",
    ["a\nb", "a\tb", "a\x00b", "a\x1bb", "not-utf8"],
    ids=["nl", "tab", "nul", "esc", "utf8"],
)
def test_a_control_character_or_a_name_not_utf8_in_a_path_is_refused_naming_the_key(
    key, name, tmp_path
):
    path, says = f"{tmp_path}/{name}", "holds a control character"
    if name == "not-utf8":
        path, says = not_utf8(tmp_path), "not valid UTF-8"
    with pytest.raises(ValueError, match=f"'{key}' .* {says}") as err:
        validated_run_config({key: path})
    assert "\n" not in str(err.value)


RUN_CONFIG = ["--run-config", "num-devices=4 num-server-rounds=1"]


@pytest.mark.parametrize(
    ("command", "option", "extra"),
    [("inprocess", "--out", RUN_CONFIG), ("run", "--out", RUN_CONFIG),
     ("run", "--certificates-dir", ["--tls", *RUN_CONFIG]), ("compare", "--out", RUN_CONFIG),
     ("certificates", "--out", [])],
)  # fmt: skip
def test_an_option_path_that_is_not_utf8_is_refused_before_anything_starts(
    command, option, extra, tmp_path, capsys
):
    assert invoke([command, option, not_utf8(tmp_path), *extra]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: Invalid value for '{option}'"), line
    assert "not valid UTF-8" in line, line
    assert list(tmp_path.iterdir()) == []


def hostile_folder(tmp_path: Path) -> Path:
    folder = tmp_path / HOSTILE_NAME
    folder.mkdir()
    return folder


def test_a_preset_with_side_by_side_runs_in_a_hostile_folder_completes(tmp_path):
    out = hostile_folder(tmp_path) / "preset"
    # Hydra's override grammar: a quoted value, its own quotes escaped (a backslash before
    # any other character is kept as it is)
    quoted = out.as_posix().replace("'", "\\'")
    args = two_policy_preset(Path("PLACEHOLDER"), "run.num-server-rounds=2", "run.num-devices=6")
    args = [f"out='{quoted}'" if a == "out=PLACEHOLDER" else a for a in args]
    proc = run_ok([FEDCGD, "reproduce", *args, "launcher.jobs=2"], timeout=600)
    assert proc.stdout.splitlines()[0] == f"output folder: {out}"
    for policy in ("bc", "fedcgd-fscd"):
        assert [x["round"] for x in lines(out / "default" / policy / "seed-0")] == [1, 2]
