"""Checks before a run starts (one line naming the key), and the claim of its folder."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from fedcgd_task.partition import apply_imbalance
from server_app.run_folder.run_status import first_line

if TYPE_CHECKING:
    from server_app.config import RunConfig
    from server_app.run_folder.folder_lock import FolderClaim

#: local-steps × batch-size <= MAX_LOCAL_PASSES × |D_v| (room for one-sample devices).
MAX_LOCAL_PASSES = 1000


def effective_result_dir(run_config: Mapping[str, Any]) -> Path:
    """``resume-from``, else ``result-dir`` (ValueError: neither)."""
    for key in ("resume-from", "result-dir"):
        value = run_config.get(key)
        if isinstance(value, str) and value:
            return Path(value).expanduser()
    raise ValueError("the run config names no result folder (result-dir and resume-from empty)")


def with_result_dir(run_config: Mapping[str, Any], out: Path) -> dict[str, Any]:
    """``run_config`` with ``result-dir`` = ``out/<name>-<UTC time>`` unless a folder is set."""
    from server_app.config import timestamped_result_dir

    if run_config.get("result-dir") or run_config.get("resume-from"):
        return dict(run_config)
    return {**run_config, "result-dir": str(timestamped_result_dir(out, run_config))}


def device_samples(
    partition: str, num_samples: int, num_devices: int, shards_per_device: int
) -> int:
    """|D_v| of every device: floor(N / V) (Dirichlet), l floor(N / (V l)) (shards)."""
    if partition == "shards":
        return shards_per_device * (num_samples // (num_devices * shards_per_device))
    return num_samples // num_devices


def check_sizes(config: RunConfig, labels: npt.ArrayLike) -> None:
    """Refuse device counts, shards and local work that the training set cannot carry."""
    task, training = config.task, config.training
    total = apply_imbalance(labels, task.imbalance_ratio, np.random.default_rng(0)).size
    source = f"the {total} training samples of {task.dataset}" + (
        f" left by imbalance-ratio = {task.imbalance_ratio:g}" if task.imbalance_ratio > 1 else ""
    )
    if task.num_devices > total:
        raise ValueError(
            f"run-config key 'num-devices' = {task.num_devices} exceeds {source}; every device "
            f"needs at least one sample: at most {total}"
        )
    shards = task.num_devices * task.shards_per_device
    if task.partition == "shards" and shards > total:
        raise ValueError(
            f"run-config keys 'num-devices' × 'shards-per-device' = {task.num_devices} × "
            f"{task.shards_per_device} = {shards} shards exceed {source}; every shard needs at "
            "least one sample"
        )
    local = device_samples(task.partition, total, task.num_devices, task.shards_per_device)
    work = training.local_steps * training.batch_size
    if work > MAX_LOCAL_PASSES * local:
        raise ValueError(
            f"run-config keys 'local-steps' × 'batch-size' = {training.local_steps} × "
            f"{training.batch_size} = {work} samples per round are {work / local:.3g} passes "
            f"over a device's {local} samples; at most {MAX_LOCAL_PASSES} passes "
            f"(local-steps × batch-size <= {MAX_LOCAL_PASSES * local})"
        )


def check_model_fits(
    model: str, dataset_name: str, num_classes: int, input_shape: tuple[int, ...]
) -> None:
    """Build ``model`` for the data set: on two blank samples, outputs [2, C] and σ̂ must run."""
    import torch

    from client_app.sigma import gradient_spread
    from fedcgd_task.models import BUILTIN_MODELS, MODEL_CONTRACT, build_model, model_function

    model_function(model)  # an unknown name or a bad reference: its own one-line error
    shape = "×".join(str(s) for s in input_shape)
    blank = torch.zeros(2, *input_shape)
    try:
        net = build_model(model, num_classes, input_shape).eval()
        with torch.no_grad():
            logits = net(blank)
        if not (isinstance(logits, torch.Tensor) and logits.is_floating_point()):
            what = logits.dtype if isinstance(logits, torch.Tensor) else type(logits).__name__
            raise ValueError(f"outputs {what}, not a float tensor")
        if tuple(logits.shape) != (2, num_classes):
            raise ValueError(f"outputs of shape {tuple(logits.shape)}, not (2, {num_classes})")
    except Exception as err:  # a wrong built-in or the researcher's model: one line
        allowed = "use model = 'auto'" if model in BUILTIN_MODELS else f"allowed: {MODEL_CONTRACT}"
        raise ValueError(
            f"run-config key 'model' = {model!r} does not fit dataset {dataset_name!r} (inputs "
            f"{shape}, {num_classes} classes): {first_line(err)}; {allowed}"
        ) from err
    try:
        gradient_spread(net, blank, torch.arange(2) % num_classes)
    except Exception as err:
        raise ValueError(
            f"run-config key 'model' = {model!r}: σ̂ (per-sample gradient norms, "
            f"client_app/sigma.py) fails on it: {type(err).__name__}: {first_line(err)}; the "
            "model must run under torch.func.vmap (no .item() or data-dependent control "
            "flow), or use only Linear, Conv1d, Conv2d and GroupNorm layers"
        ) from err


def claim_run(run_config: Mapping[str, Any], out: Path) -> tuple[dict[str, Any], FolderClaim]:
    """Check a run and lock its folder for this command's life; the run config and the claim."""
    from server_app.checkpoint import claim_run_folder
    from server_app.run_folder.folder_lock import LOCK_FILES, claim_folder

    fresh = not run_config.get("result-dir") and not run_config.get("resume-from")
    config = with_result_dir(run_config, out)
    folder = effective_result_dir(config)
    early = None
    claimed = any(os.path.lexists(folder / name) for name in LOCK_FILES)  # the holder is named
    if not fresh and (folder.is_symlink() or claimed):
        key = "resume-from" if config.get("resume-from") else "result-dir"
        early = claim_folder(folder, f"run-config key '{key}'", create=False)
    try:
        parsed = check_before_start(config)
        if early is not None:
            return config, early
        claim, parsed, _ = claim_run_folder(parsed, writer=False, fresh_name=fresh)
    except BaseException:
        if early is not None:
            early.release()
        raise
    if fresh:
        config["result-dir"] = parsed.result_dir
    return config, claim


def check_before_start(run_config: Mapping[str, Any]) -> RunConfig:
    """Every check before the start (loads the data set; one-line errors); the parsed config.
    Not the folder's locks: each caller claims or probes them first (:func:`claim_run`,
    ``compare.plans.plan_points``)."""  # noqa: D205, D209
    from fedcgd_task.datasets import load_train_set
    from fedcgd_task.training import compute_device
    from server_app.checkpoint import check_resume, load_checkpoint
    from server_app.config import parse_run_config
    from server_app.run_folder.results import check_new_result_dir
    from server_app.setup import build_setup, build_uplink

    config = parse_run_config(run_config)
    compute_device(config.task.device)  # a GPU this process does not see: refused here
    build_uplink(config, np.random.default_rng(config.seed), first_round=0)  # trace, your class
    key = "resume-from" if run_config.get("resume-from") else "result-dir"
    if run_config.get(key):  # a resume-from that cannot go on, a result-dir a run cannot use
        folder = Path(str(run_config[key])).expanduser()  # links, locks: refused by the claim
        if key == "resume-from":
            check_resume(config)
        else:
            check_new_result_dir(folder)
    train_set = load_train_set(config.task)
    check_sizes(config, train_set.labels)
    check_model_fits(
        config.task.model, config.task.dataset, train_set.num_classes, train_set.input_shape
    )
    if config.resume_from:  # the checkpoint restored on fresh run objects, as the run will
        build_setup(config, load_checkpoint(Path(config.resume_from)))
    return config
