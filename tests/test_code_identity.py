"""Which code computed a run: the digest, its record in config.json and runs.csv, the warnings."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path

import pytest
from task_settings import checkpointed_run_config

from experiments.compare.results import summarise, warn_mixed_code
from experiments.run.inprocess import run_inprocess
from fedcgd_config.imports import APP_PACKAGES
from server_app.run_folder.results import (
    COMPUTING_PACKAGES,
    CONFIG_FILE,
    code_entries,
    code_identity,
    mixed_code_line,
    run_digests,
    source_digest,
)

VERSIONS = {"numpy": "2.0.0", "torch": "2.1.0"}


def test_the_digest_is_sha256_of_paths_bytes_and_versions_in_order(tmp_path: Path) -> None:
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    (tmp_path / "pkg" / "a.py").write_bytes(b"x = 1\n")
    (tmp_path / "pkg" / "sub" / "b.py").write_bytes(b"y = 2\n")
    (tmp_path / "pkg" / "notes.txt").write_text("not source")  # left out, as other packages
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "e.py").write_bytes(b"z = 3\n")
    by_hand = hashlib.sha256(
        b"pkg/a.py\0x = 1\n\0pkg/sub/b.py\0y = 2\n\0numpy=2.0.0\ntorch=2.1.0\n"
    ).hexdigest()[:16]
    assert source_digest(tmp_path, ["pkg"], VERSIONS) == by_hand
    # this checkout's identity: the computing packages and the libraries' versions
    identity = code_identity()
    root = Path(__file__).resolve().parents[1]
    assert identity["digest"] == source_digest(root, COMPUTING_PACKAGES, identity["versions"])
    assert set(identity["versions"]) == {"numpy", "scipy", "torch", "flwr", "python"}
    packages = {"channel", "client_app", "fedcgd_config", "fedcgd_strategy", "fedcgd_task"}
    assert packages | {"server_app"} == set(COMPUTING_PACKAGES)
    # an error's "(file:line in fn)" names the researcher's frame: never one of the project's
    wheel = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    assert set(wheel["targets"]["wheel"]["packages"]) == APP_PACKAGES


NOW = {"digest": "new", "versions": {"torch": "2"}}
#: The entries of a run's code list: from round 1 (old code, unknown code, this code), from 4.
OLD = {"digest": "old", "from_round": 1}
UNKNOWN = {"digest": "unknown", "versions": {}, "from_round": 1}
NOW_1, NOW_4 = {**NOW, "from_round": 1}, {**NOW, "from_round": 4}


@pytest.mark.parametrize(
    ("recorded", "from_round", "expected"),
    [
        (None, 1, [NOW_1]),
        ({"code": [{"digest": "new", "from_round": 1}]}, 4, [{"digest": "new", "from_round": 1}]),
        ({"code": [OLD]}, 4, [OLD, NOW_4]),
        ({"task": {}}, 4, [UNKNOWN, NOW_4]),  # a run started before runs recorded their code
        ({"code": ["old"]}, 4, [UNKNOWN, NOW_4]),  # damaged: not a list of entries
        ({}, 1, [NOW_1]),  # unreadable, but from round 1: all this code's
    ],
    ids=["new run", "same code", "other code", "no record", "damaged", "restart"],
)
def test_the_code_list_of_config_json(recorded, from_round, expected) -> None:
    assert code_entries(recorded, from_round, NOW) == expected


def test_a_run_records_its_code_and_a_resume_by_other_code_is_said(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "run"
    config = checkpointed_run_config(folder, **{"num-devices": 6, "num-server-rounds": 3})
    run_inprocess(config)
    now = code_identity()
    recorded = json.loads((folder / CONFIG_FILE).read_text())
    assert recorded["code"] == [{**now, "from_round": 1}]
    assert summarise(folder)["code"] == now["digest"]
    # the same run, started by older code: its record says so, and a resume adds this code
    recorded["code"] = [{"digest": "0123456789abcdef", "versions": {}, "from_round": 1}]
    (folder / CONFIG_FILE).write_text(json.dumps(recorded))
    more = checkpointed_run_config(
        folder, **{"num-devices": 6, "num-server-rounds": 5, "resume-from": str(folder)}
    )
    run_inprocess(more)
    resumed = json.loads((folder / CONFIG_FILE).read_text())["code"]
    assert resumed == [
        {"digest": "0123456789abcdef", "versions": {}, "from_round": 1},
        {**now, "from_round": 4},
    ]
    row = summarise(folder)
    assert row["code"] == f"0123456789abcdef {now['digest']}"
    warn_mixed_code([row, {**row, "code": now["digest"]}])
    assert "these 2 runs were computed by 2 versions of the code" in capsys.readouterr().err
    assert mixed_code_line(["a", "a", "a"]) is None
    line = mixed_code_line(["a", "a b", "unknown"])
    assert line is not None
    assert "these 3 runs were computed by 3 versions of the code (a, b, unknown;" in line
    assert run_digests({"code": [{"digest": "a"}, {"digest": "b"}]}) == "a b"
    assert run_digests({"task": {}}) == run_digests(None) == "unknown"


def test_the_code_is_no_setting_of_figure_labels_or_indicator_pairs(tmp_path: Path) -> None:
    from experiments.analysis.evidence import _run_settings
    from experiments.analysis.plot_runs import differing_settings

    base = {"task": {"seed": 0}, "training": {"local_steps": 1}}
    a = {**base, "code": [{"digest": "a", "from_round": 1}]}
    b = {**base, "code": [{"digest": "b", "from_round": 1}]}
    assert differing_settings([a, b]) == ["", ""]
    c = {**b, "training": {"local_steps": 5}}
    assert differing_settings([a, c]) == ["local_steps=1", "local_steps=5"]
    # A damaged record (an object, not the list this code writes) is no setting either.
    damaged = {**base, "code": {"digest": "c", "from_round": 1}}
    for name, config in (("a", a), ("b", b), ("damaged", damaged), ("c", c)):
        (tmp_path / name).mkdir()
        (tmp_path / name / CONFIG_FILE).write_text(json.dumps(config))
    same = {_run_settings(tmp_path / name) for name in ("a", "b", "damaged")}
    assert len(same) == 1 and None not in same
    assert _run_settings(tmp_path / "c") not in same
