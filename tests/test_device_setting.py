"""The ``device`` setting on a machine without a GPU: its check, its resolution, its plumbing.

What runs on a GPU is in ``tests/test_gpu.py`` (``-m gpu``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from experiments.run.flwr_run import LocalFederation
from experiments.run.launcher import LaunchOptions, main
from fedcgd_config.schema import SCHEMA
from fedcgd_config.setting import check_value
from fedcgd_task.training import compute_device

WHERE = "run-config key 'device'"


@pytest.mark.parametrize("value", ["auto", "cpu", "cuda", "cuda:0", "cuda:7", "cuda:1234"])
def test_a_device_the_setting_allows(value: str) -> None:
    assert check_value(SCHEMA["device"], value, WHERE) == value


@pytest.mark.parametrize(
    "value",
    ["gpu", "CUDA", "cuda:", "cuda:-1", "cuda:01", "cuda: 1", " cuda", "cuda:1 ", "cuda:12345",
     "cuda:1.0", "mps", "", 0, None, True],
)  # fmt: skip
def test_a_device_the_setting_refuses_names_the_key_and_what_is_allowed(value: object) -> None:
    with pytest.raises(ValueError) as err:
        check_value(SCHEMA["device"], value, WHERE)
    message = str(err.value)
    assert message.startswith(f'{WHERE} must be one of "auto", "cpu", "cuda" or "cuda:N"')
    assert message.endswith(f"got {value!r}") and "\n" not in message


def seen_gpus(monkeypatch: pytest.MonkeyPatch, count: int) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)


def test_auto_cpu_and_each_gpu_seen_are_resolved_and_another_is_refused(monkeypatch) -> None:
    seen_gpus(monkeypatch, 0)  # no GPU: auto and cpu are the CPU, cuda is refused
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert compute_device("auto") == compute_device("cpu") == torch.device("cpu")
    for setting in ("cuda", "cuda:0"):
        with pytest.raises(ValueError) as err:
            compute_device(setting)
        assert str(err.value) == (
            f"run-config key 'device' = {setting!r}, but this process sees 0 CUDA device(s) "
            f"(torch {torch.__version__}, CUDA_VISIBLE_DEVICES=''); allowed here: \"auto\", "
            '"cpu"'
        )
    seen_gpus(monkeypatch, 2)  # two: each is named, a third is refused
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert compute_device("auto") == torch.device("cuda")
    assert compute_device("cuda") == torch.device("cuda")
    assert compute_device("cuda:1") == torch.device("cuda", 1)
    assert compute_device("cpu") == torch.device("cpu")
    with pytest.raises(ValueError, match=r'sees 2 CUDA .*allowed here: "auto", "cpu", "cuda:0", '
                       r'"cuda:1"$'):  # fmt: skip
        compute_device("cuda:2")


def refused(capsys, **options) -> str:
    """The one error line of ``fedcgd run`` with ``options``, which must exit with 2."""
    assert main(LaunchOptions(**options)) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def test_a_gpu_hidden_by_ray_or_absent_is_refused_at_once(capsys, monkeypatch, tmp_path) -> None:
    seen_gpus(monkeypatch, 1)  # the launcher's own process sees one: Ray's ClientApps would not
    line = refused(capsys, run_config="device='cuda' num-server-rounds=1")
    assert line == (
        "error: run-config key 'device' = 'cuda' needs --gpus-per-client > 0 in the simulation "
        "engine (Ray hides every GPU from a ClientApp that asks for none)"
    )
    line = refused(capsys, run_config="device='cuda:0'", gpus_per_client=1.0)
    assert line.startswith("error: run-config key 'device' = 'cuda:0': in the simulation engine")
    seen_gpus(monkeypatch, 0)  # a GPU this machine lacks
    line = refused(capsys, run_config="device='cuda'", gpus_per_client=1.0, out=tmp_path)
    assert line.startswith("error: run-config key 'device' = 'cuda', but this process sees 0 CUDA")
    assert list(tmp_path.iterdir()) == []  # no run folder was made


GPU_LIST = "; allowed: comma-separated GPU numbers, e.g. 0,1"


@pytest.mark.parametrize(
    ("options", "said"),
    [({"supernode_gpus": "0,1"}, "error: --supernode-gpus is for --deployment runs only"),
     ({"supernode_gpus": "0,x", "deployment": True}, f"error: --supernode-gpus = '0,x'{GPU_LIST}"),
     ({"supernode_gpus": "", "deployment": True}, f"error: --supernode-gpus = ''{GPU_LIST}")],
)  # fmt: skip
def test_bad_supernode_gpus_are_refused(capsys, options: dict, said: str) -> None:
    assert refused(capsys, **options) == said


def test_each_supernode_sees_its_own_gpu(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5")
    fed = LocalFederation(tmp_path, num_supernodes=5, simulation=False, supernode_gpus=(2, 5))
    assert [fed.supernode_env(i)["CUDA_VISIBLE_DEVICES"] for i in range(5)] == [
        "2", "5", "2", "5", "2",
    ]  # fmt: skip
    plain = LocalFederation(tmp_path, num_supernodes=2, simulation=False)
    assert plain.supernode_env(1)["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5"
