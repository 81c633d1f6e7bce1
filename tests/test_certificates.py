"""Certificates and keys: created new, never through a link, private keys 0600 from creation."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from subprocesses import run_ok

from experiments.cli import invoke
from experiments.run import certificates
from experiments.run.certificates import certificate_names, make_certificates


def one_line(err: pytest.ExceptionInfo[ValueError]) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize(("name", "dangling"), [("ca.crt", False), ("server.key", True)])
def test_a_link_planted_in_the_folder_is_refused_and_its_target_untouched(tmp_path, name, dangling):
    target = tmp_path / "precious.txt"
    if not dangling:
        target.write_text("keep me")
    out = tmp_path / "certs"
    out.mkdir()
    (out / name).symlink_to(target)
    with pytest.raises(ValueError) as err:
        make_certificates(out, supernodes=1)
    assert f"holds symbolic links ({name})" in one_line(err)
    assert target.read_text() == "keep me" if not dangling else not target.exists()
    assert [p.name for p in out.iterdir()] == [name]  # nothing written beside it


def test_a_folder_that_is_a_link_or_a_link_planted_after_the_check_is_not_followed(
    tmp_path, monkeypatch
):
    """A folder that is a link is refused; the check aside, each file is made with O_EXCL |
    O_NOFOLLOW: a link appearing between the check and the write (a race) makes it fail."""
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(ValueError) as err:
        make_certificates(tmp_path / "link", supernodes=1)
    assert "is a symbolic link" in one_line(err)
    assert list(real.iterdir()) == []
    target = tmp_path / "precious.txt"
    target.write_text("keep me")
    out = tmp_path / "certs"
    out.mkdir()
    monkeypatch.setattr(certificates, "check_certificates_dir", lambda out, supernodes: None)
    (out / "server.pem").symlink_to(target)
    with pytest.raises(ValueError) as err:
        make_certificates(out, supernodes=0)
    assert "already holds server.pem" in one_line(err)
    assert target.read_text() == "keep me"


def test_an_earlier_set_is_never_overwritten(tmp_path, capsys):
    out = tmp_path / "certs"
    assert invoke(["certificates", "--out", str(out), "--supernodes", "2"]) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == sorted(certificate_names(2))
    assert invoke(["certificates", "--out", str(out), "--supernodes", "2"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: certificates folder")
    assert "already holds ca.key, ca.crt, server.pem, server.key, supernode-0.key" in line
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    with pytest.raises(ValueError, match=r"already holds supernode-1\.key"):
        (out / "ca.key").unlink()
        for name in ("ca.crt", "server.pem", "server.key", "supernode-0.key", "supernode-0.pub"):
            (out / name).unlink()
        make_certificates(out, supernodes=2)  # one file of the set left is enough to refuse


def test_the_launcher_refuses_a_certificates_folder_with_a_link_before_the_start(
    tmp_path, monkeypatch, capsys
):
    from experiments.run import launcher

    monkeypatch.setattr(launcher, "run_flwr", lambda *a, **k: pytest.fail("the run started"))
    out = tmp_path / "certs"
    out.mkdir()
    (out / "ca.crt").symlink_to(tmp_path / "elsewhere.crt")
    argv = ["--deployment", "--tls", "--certificates-dir", str(out), "--out", str(tmp_path)]
    assert invoke(["run", *argv, "--run-config", "num-devices=2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: certificates folder") and err.count("\n") == 1, err
    assert not (tmp_path / "elsewhere.crt").exists()


#: Make a set with umask 0 and look at the folder at every audited event (each open, chmod,
#: ...): the modes of the keys seen, and the flags of every file opened in the folder.
WATCH = """
import json, os, stat, sys
from pathlib import Path
from experiments.run.certificates import make_certificates

out = Path(sys.argv[1])
seen, opened, busy = {}, [], False

def hook(event, args):
    global busy
    if busy or not watching:
        return
    busy = True
    try:
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            opened.append([os.fsdecode(args[0]), args[2]])
        if out.is_dir():
            for name in os.listdir(out):
                if name.endswith(".key"):
                    seen.setdefault(name, set()).add(stat.S_IMODE(os.lstat(out / name).st_mode))
    finally:
        busy = False

watching = False
sys.addaudithook(hook)
os.umask(0)
out.mkdir()
watching = True
make_certificates(out, supernodes=2)
watching = False
print(json.dumps({"seen": {k: sorted(v) for k, v in seen.items()}, "opened": opened}))
"""


def test_keys_are_never_readable_by_others_even_with_umask_zero(tmp_path):
    out = tmp_path / "certs"
    proc = run_ok([sys.executable, "-c", WATCH, str(out)], timeout=120)
    report = json.loads(proc.stdout)
    keys = ["ca.key", "server.key", "supernode-0.key", "supernode-1.key"]
    assert sorted(report["seen"]) == keys
    assert all(modes == [0o600] for modes in report["seen"].values()), report["seen"]
    # every file of the set was opened once, new, never through a link
    # (a file opened relative to the folder's descriptor is audited by its name alone)
    names = certificate_names(2)
    in_folder = [(Path(p).name, flags) for p, flags in report["opened"]
                 if Path(p).name in names and Path(p).parent in (out, Path("."))]  # fmt: skip
    assert sorted(name for name, _ in in_folder) == sorted(names)
    required = os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    assert all(flags & required == required for _, flags in in_folder), in_folder
    for name in certificate_names(2):
        mode = 0o600 if name.endswith(".key") else 0o644
        assert stat.S_IMODE((out / name).lstat().st_mode) == mode, name
