"""The ServerApp: read the run config once, build cell, policy and strategy, evaluate, save."""

from __future__ import annotations

import time
from logging import INFO
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.supercore import log

from channel import Cell
from fedcgd_strategy.policies import make_policy
from fedcgd_strategy.strategy import ScheduledStrategy
from server_app.config import RunConfig, parse_run_config
from server_app.results import MODEL_FILE, ResultWriter
from task.datasets import load_test_set, load_train_set
from task.models import build_model, count_parameters
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

    writer = ResultWriter(config.result_dir, config.num_server_rounds)
    resolved = config.to_dict()
    resolved.update(
        num_parameters=num_params,
        model_bits_used=model_bits,
        num_classes=num_classes,
        target_dist_global=target.tolist(),
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
    strategy = ScheduledStrategy(
        policy=policy,
        cell=Cell(config.cell, np.random.default_rng(cell_seed)),
        model_bits=model_bits,
        total_bandwidth_hz=config.cell.total_bandwidth_hz,
        num_devices=config.task.num_devices,
        num_classes=num_classes,
        target_dist=target if config.target_dist == "global" else None,
        rng=np.random.default_rng(policy_seed),
        protocol=config.protocol,
        query_timeout_s=config.query_timeout_s,
    )
    history: list[dict[str, Any]] = []

    def evaluate_fn(server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """End-of-round hook: evaluate (when due) and write the round's line to metrics.jsonl."""
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
        history.append(line)
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
        num_rounds=config.num_server_rounds,
        timeout=config.train_timeout_s,
        train_config=ConfigRecord(config.training.to_config()),
        evaluate_fn=evaluate_fn,
    )
    torch.save(result.arrays.to_torch_state_dict(), writer.dir / MODEL_FILE)
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
        "wall_time_s": time.perf_counter() - t_start,
        "result_dir": str(writer.dir),
    }
    writer.write_summary(summary)
    log(INFO, "results written to %s", writer.dir)
    return summary
