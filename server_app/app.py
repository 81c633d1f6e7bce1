"""The ServerApp: read the run config once, build cell, policy and strategy, evaluate, save."""

from __future__ import annotations

import json
import time
from logging import INFO
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from channel import Cell
from fedcgd_strategy.policies import make_policy
from fedcgd_strategy.strategy import ScheduledStrategy
from server_app.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from server_app.config import RunConfig, parse_run_config
from server_app.results import CONFIG_FILE, MODEL_FILE, ResultWriter, json_ready
from task.datasets import load_test_set, load_train_set
from task.models import build_model, count_parameters
from task.settings import flatten
from task.training import compute_device, evaluate

app = ServerApp()

#: Bits per model parameter when the run config leaves ``channel.model-bits`` at 0.
BITS_PER_PARAMETER = 32


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``: validate the run config, then run the federation."""
    config = parse_run_config(context.run_config)
    run_federation(grid, config)


def wait_for_nodes(grid: Grid, expected: int, timeout_s: float) -> int:
    """Wait until ``expected`` nodes are connected (SuperNodes may still be starting).

    Returns the number connected. Never hangs: with fewer after ``timeout_s`` it raises.

    Raises
    ------
    RuntimeError
        Naming how many nodes connected and what to do.
    """
    deadline = time.monotonic() + timeout_s
    connected = len(list(grid.get_node_ids()))
    while connected < expected and time.monotonic() < deadline:
        time.sleep(1.0)
        connected = len(list(grid.get_node_ids()))
    if connected < expected:
        raise RuntimeError(
            f"only {connected} of {expected} SuperNodes connected after {timeout_s:.0f} s "
            f"(run-config query-timeout-s); start the missing SuperNodes or set "
            f"num-devices={connected}"
        )
    return connected


#: Settings that may differ between a run and its resumption.
RESUMABLE_CHANGES = ("num_server_rounds", "resume_from", "checkpoint_every", "result_dir")


def check_same_run(result_dir: Path, resolved: dict[str, Any]) -> None:
    """Refuse to resume ``result_dir`` with settings other than those it was started with.

    Raises
    ------
    ValueError
        Naming the settings that differ.
    """
    before = flatten(json.loads((result_dir / CONFIG_FILE).read_text()))
    now = flatten(json.loads(json.dumps(json_ready(resolved))))
    differ = sorted(
        k
        for k in set(before) | set(now)
        if k not in RESUMABLE_CHANGES and before.get(k) != now.get(k)
    )
    if differ:
        raise ValueError(
            f"run-config key 'resume-from': {result_dir} was started with other settings "
            f"({', '.join(differ)}); resume with the same run config (only num-server-rounds "
            "may change)"
        )


def run_federation(grid: Grid, config: RunConfig) -> dict[str, Any]:
    """Run ``config.num_server_rounds`` scheduled rounds on ``grid`` and write the result directory.

    Parameters
    ----------
    grid : Grid
        Flower's grid (simulation, deployment, or a test double).
    config : RunConfig
        The validated run config.

    Returns
    -------
    dict
        The end-of-run summary (also written to ``summary.json``).

    """
    t_start = time.perf_counter()
    cell_seed, policy_seed = np.random.SeedSequence(config.seed).spawn(2)
    train_set = load_train_set(config.task)
    test_set = load_test_set(config.task)
    num_classes = train_set.num_classes
    model = build_model(config.task.model, num_classes, train_set.input_shape, seed=config.seed)
    num_params = count_parameters(model)
    model_bits = config.model_bits or num_params * BITS_PER_PARAMETER
    target = np.bincount(train_set.labels, minlength=num_classes) / len(train_set)
    device = compute_device()
    x_test, y_test = test_set.tensors()

    resolved = config.to_dict()
    resolved.update(
        num_parameters=num_params,
        model_bits_used=model_bits,
        num_classes=num_classes,
        target_dist_global=target.tolist(),
    )
    resume = load_checkpoint(Path(config.resume_from)) if config.resume_from else None
    if resume is not None:
        check_same_run(Path(config.resume_from), resolved)
        if resume.round >= config.num_server_rounds:
            raise ValueError(
                f"run-config key 'resume-from': the checkpoint is after round {resume.round}; "
                f"num-server-rounds = {config.num_server_rounds} leaves nothing to run"
            )
    writer = ResultWriter(
        config.result_dir,
        config.num_server_rounds,
        resume_after=None if resume is None else resume.round,
        elapsed_s=0.0 if resume is None else resume.elapsed_s,
    )
    writer.write_config(resolved)

    policy = make_policy(
        config.policy,
        num_devices=config.task.num_devices,
        num_classes=num_classes,
        initial_g=config.initial_g,
        pack_rule=config.pack_rule,
        poc_candidates=config.poc_candidates,
        fedcbs_lambda=config.fedcbs_lambda,
        exact_time_limit_s=config.exact_time_limit_s or None,
    )
    cell_rng, policy_rng = np.random.default_rng(cell_seed), np.random.default_rng(policy_seed)
    cell = Cell(config.cell, cell_rng)  # the drop: a pure function of the seed
    if resume is not None:
        policy.load_state_dict(resume.policy_state)
        cell_rng.bit_generator.state = resume.cell_rng_state
        policy_rng.bit_generator.state = resume.policy_rng_state
        model.load_state_dict(resume.model)
        log(INFO, "resuming %s after round %d", config.resume_from, resume.round)
    strategy = ScheduledStrategy(
        policy=policy,
        cell=cell,
        model_bits=model_bits,
        total_bandwidth_hz=config.cell.total_bandwidth_hz,
        num_devices=config.task.num_devices,
        num_classes=num_classes,
        target_dist=target if config.target_dist == "global" else None,
        rng=policy_rng,
        protocol=config.protocol,
        query_timeout_s=config.query_timeout_s,
        round_offset=0 if resume is None else resume.round,
    )

    def evaluate_fn(flower_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """End-of-round hook: evaluate (when due), write the round's line, checkpoint (when due)."""
        if flower_round == 0 and strategy.round_offset:
            return None  # resuming: the starting model was evaluated in the interrupted run
        server_round = flower_round + strategy.round_offset
        last = server_round == config.num_server_rounds
        due = server_round == 0 or server_round % config.eval_every == 0 or last
        metrics: dict[str, int | float | list[int] | list[float]] = {}
        t0 = time.perf_counter()
        if due:
            model.load_state_dict(arrays.to_torch_state_dict())
            loss, acc = evaluate(model.to(device), x_test, y_test)
            metrics = {"accuracy": float(acc), "loss": float(loss)}
        eval_s = time.perf_counter() - t0
        if server_round == 0:
            log(
                INFO,
                "initial model: accuracy %.4f, loss %.4f",
                metrics["accuracy"],
                metrics["loss"],
            )
            return MetricRecord(metrics)
        record = strategy.last_record
        if record is None or record.round != server_round:
            raise RuntimeError(f"round {server_round}: the strategy recorded no round")
        line: dict[str, Any] = {
            "round": server_round,
            "accuracy": metrics.get("accuracy"),
            "loss": metrics.get("loss"),
            "eval_s": eval_s,
            "wall_time_s": writer.elapsed_s(),
        }
        line.update(record.to_dict())
        writer.append_round(line)
        every = config.checkpoint_every
        if every and (server_round % every == 0 or last):
            checkpoint = Checkpoint(
                round=server_round,
                model=arrays.to_torch_state_dict(),
                policy_state=strategy.policy.state_dict(),
                cell_rng_state=dict(cell_rng.bit_generator.state),
                policy_rng_state=dict(policy_rng.bit_generator.state),
                elapsed_s=writer.elapsed_s(),
            )
            save_checkpoint(writer.dir, checkpoint)
        log(
            INFO,
            "%s",
            writer.progress(
                server_round,
                line["accuracy"],
                record.num_scheduled,
                record.num_available,
            ),
        )
        return MetricRecord(metrics) if metrics else None

    wait_for_nodes(grid, config.task.num_devices, config.query_timeout_s)
    result = strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=config.num_server_rounds - strategy.round_offset,
        timeout=config.train_timeout_s,
        train_config=ConfigRecord(config.training.to_config()),
        evaluate_fn=evaluate_fn,
    )
    torch.save(result.arrays.to_torch_state_dict(), writer.dir / MODEL_FILE)
    history = writer.lines
    accs = [h["accuracy"] for h in history if h.get("accuracy") is not None]
    wemds = [h["wemd"] for h in history if h.get("wemd") is not None and np.isfinite(h["wemd"])]
    summary = {
        "policy": config.policy,
        "rounds": config.num_server_rounds,
        "final_accuracy": accs[-1] if accs else None,
        "max_accuracy": max(accs) if accs else None,
        "mean_scheduled": float(np.mean([h.get("num_scheduled", 0) for h in history]))
        if history
        else 0.0,
        "mean_wemd": float(np.mean(wemds)) if wemds else None,
        "wall_time_s": writer.elapsed_s() if resume is not None else time.perf_counter() - t_start,
        "result_dir": str(writer.dir),
    }
    writer.write_summary(summary)
    log(INFO, "results written to %s", writer.dir)
    return summary
