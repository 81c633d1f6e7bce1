"""The CUDA path, on a machine with a GPU (``-m gpu``; skipped where torch sees none).

A run on the GPU must compute what the same run computes on the CPU. The comparisons run the
built-in models in float64 (``layer_cases:mlp_float64``, ``layer_cases:cnn1d_float64``): there
the GPU's kernels differ from the CPU's by the order of their sums alone, the same kind of
difference as between cohort execution and the per-device path, which
``tests/test_cohort_execution.py`` bounds by ``REL`` (its derivation is there). In float32
convolutions may use TF32 on the GPU (10-bit mantissas), and no tolerance of float32 holds
across a run: those runs are timed, not compared (docs/deployment.md, "GPUs").
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from test_cohort_execution import CNN1D, MNIST1D, assert_same_runs, whole_run

from client_app.device_round import process_model
from fedcgd_task.training import compute_device

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device"),
]


@pytest.mark.parametrize("cohorts", [True, False])
@pytest.mark.parametrize(
    ("policy", "data", "tau"),
    [
        ("fedcgd-fscd", {}, 5),
        ("fedcgd-gs", {**MNIST1D, "model": CNN1D, "channel.deadline-s": 0.004}, 2),
    ],
)
def test_a_run_on_the_gpu_equals_the_run_on_the_cpu(
    tmp_path: Path, policy: str, data: dict, tau: int, cohorts: bool
) -> None:
    settings = {"policy": policy, "local-steps": tau, **data}
    cpu = whole_run(tmp_path, "cpu", cohorts=cohorts, device="cpu", **settings)
    gpu = whole_run(tmp_path, "gpu", cohorts=cohorts, device="cuda", **settings)
    assert_same_runs(cpu, gpu)


def test_the_devices_model_sits_on_the_gpu_the_setting_names() -> None:
    last = torch.cuda.device_count() - 1
    model = process_model("mlp", 10, (1, 8, 8), f"cuda:{last}")
    assert {p.device for p in model.parameters()} == {torch.device("cuda", last)}
    assert compute_device("auto").type == "cuda"
    with pytest.raises(ValueError, match=f'allowed here: .*"cuda:{last}"'):
        compute_device(f"cuda:{last + 1}")
