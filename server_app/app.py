"""The ServerApp: read the run config once, build the run, run its rounds, write the results."""

from __future__ import annotations

import contextlib
import functools
import logging
import time
from collections.abc import Mapping
from logging import WARNING
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.serverapp import Grid, ServerApp

from fedcgd_strategy.errors import OneLineMessage
from fedcgd_strategy.flower.simulation import is_simulation, patient, stall_alarm
from server_app.checkpoint import ResumePlan, claim_run_folder, save_model
from server_app.config import RunConfig, check_components, parse_run_config
from server_app.recorder import RoundRecorder
from server_app.run_folder.files import ResultWriteError, as_failure, watching
from server_app.run_folder.results import CHECKPOINT_FILE, ResultWriter, sync_run_files
from server_app.run_folder.run_status import (
    COMPLETED,
    FAILED,
    FAILURE_MARKER,
    RUNNING,
    RunStatus,
    ended_by,
    lost_counts,
    lost_note,
    one_line,
    write_status,
)
from server_app.setup import RunSetup, build_setup

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """Entry point of ``flwr run``; a one-line failure is printed after :data:`FAILURE_MARKER`."""
    run_config = context.run_config
    fresh = not run_config.get("result-dir") and not run_config.get("resume-from")
    config = parse_run_config(run_config)
    check_components(config)  # a bad policy or aggregator parameter: before anything starts
    try:
        wait_for_nodes(grid, config.task.num_devices, config.query_timeout_s)
        run_federation(grid, config, fresh_name=fresh)
    except Exception as err:
        if not isinstance(err, OneLineMessage):
            raise
        say(FAILURE_MARKER + one_line(err))
        if isinstance(err, ResultWriteError):  # under plain `flwr run` no command says what next
            fix = "free space on the disk" if err.disk_full else "fix the file system"
            folder = Path(err.path).parent
            if (folder / CHECKPOINT_FILE).is_file():
                say(f"{fix}, then continue the run from its checkpoint with resume-from='{folder}'")
            else:
                say(f"{fix}, then run it again in a new folder ({folder} holds no checkpoint)")


#: Print one line of the run's own output (streamed by ``flwr run --stream`` too).
say = functools.partial(print, flush=True)


#: Seconds a simulation's SuperNode count must stay the same to be its size.
SIMULATION_SETTLE_S = 1.0


class TooFewNodesError(OneLineMessage, RuntimeError):
    """Fewer SuperNodes than ``num-devices``: the message says what to run instead."""


def wait_for_nodes(grid: Grid, expected: int, timeout_s: float) -> None:
    """Wait for ``expected`` nodes (a simulation's count settles), else TooFewNodesError."""
    simulation = is_simulation(grid)
    start = time.monotonic()
    connected = len(list(grid.get_node_ids()))
    same_since = start
    while connected < expected and time.monotonic() - start < timeout_s:
        if simulation and connected and time.monotonic() - same_since >= SIMULATION_SETTLE_S:
            break
        time.sleep(0.1 if simulation else 1.0)
        now = len(list(grid.get_node_ids()))
        if now != connected:
            connected, same_since = now, time.monotonic()
    if connected < expected and simulation:
        raise TooFewNodesError(
            f"Flower's simulation has {connected} SuperNodes but num-devices = {expected} "
            "needs one per device: run flwr run . --stream --federation-config "
            f'"num-supernodes={expected} client-resources-num-cpus=1" (with your --run-config), '
            f'or set --run-config "num-devices={connected}", or use fedcgd run, which sizes '
            "the federation itself"
        )
    if connected < expected:
        raise TooFewNodesError(
            f"only {connected} of {expected} SuperNodes connected after {timeout_s:.0f} s "
            f"(run-config query-timeout-s); start the missing SuperNodes or set "
            f"num-devices={connected}"
        )


def run_federation(grid: Grid, config: RunConfig, *, fresh_name: bool = False) -> dict[str, Any]:
    """Run the rounds on ``grid`` in the claimed folder (``fresh_name``: printed); its summary."""
    torch.set_num_threads(1)
    flower, level = logging.getLogger("flwr"), logging.getLogger("flwr").level
    flower.setLevel(level if config.verbose else WARNING)  # its per-round INFO lines: verbose
    with watching() as noted:
        try:
            claim, config, plan = claim_run_folder(config, writer=True, fresh_name=fresh_name)
            if fresh_name:
                say(f"result folder: {config.result_dir}")
            with claim:
                return _record_run(grid, config, plan, noted)
        except BaseException as err:
            failure = as_failure(err, noted)
            if failure is err:
                raise
            raise failure from err
        finally:
            flower.setLevel(level)


def _record_run(
    grid: Grid, config: RunConfig, plan: ResumePlan | None, noted: list[int]
) -> dict[str, Any]:
    """Run and record in the claimed folder (a resumed run is built before anything is written)."""
    result_dir = Path(config.result_dir)
    done = 0 if plan is None else plan.checkpoint.round
    setup = None if plan is None else build_setup(config, plan.checkpoint)
    kept = [] if plan is None else plan.lines
    write_status(
        result_dir, RunStatus(RUNNING, done, config.num_server_rounds, **lost_counts(kept))
    )
    writer: ResultWriter | None = None
    try:
        writer = ResultWriter(
            result_dir, config.num_server_rounds, kept_lines=None if plan is None else plan.lines,
            elapsed_s=0.0 if plan is None else plan.checkpoint.elapsed_s,
        )  # fmt: skip
        if setup is not None:
            writer.write_config(setup.resolved)
        if plan is not None and plan.finish_only:
            say(f"finishing {result_dir} from its checkpoint after round {done}")
            final_model = start_model = plan.checkpoint.model
        else:
            if setup is None:
                setup = build_setup(config, on_settings=writer.write_config)
            else:
                say(f"resuming {config.resume_from} after round {setup.round_offset}")
            final_model, start_model = train_rounds(grid, config, writer, setup)
        with_uploads = sum(1 for line in writer.lines[len(kept) :] if line.get("num_uploaded"))
        return write_end(config, writer, final_model, start_model, with_uploads)
    except BaseException as err:
        lines = writer.lines if writer is not None else kept
        last = lines[-1]["round"] if lines else done
        with contextlib.suppress(ResultWriteError):  # a full disk may refuse this one too
            ended = ended_by(as_failure(err, noted), lines, last, config.num_server_rounds)
            write_status(result_dir, ended, durable=False)
            sync_run_files(result_dir)
        raise


#: A run fails when its aggregation failed in more than this share of the rounds with uploads.
MAX_FAILED_AGGREGATION_SHARE = 0.5
#: Float32 roundings a round may move a model whose true update is nothing (eps * ||model||).
ROUNDING_ULPS_PER_ROUND = 4


def no_upload_reason(lines: list[dict[str, Any]]) -> str | None:
    """Why a run whose metrics lines are ``lines`` trained nothing; None when a device uploaded."""
    if any(int(line.get("num_uploaded") or 0) > 0 for line in lines):
        return None
    failures = sum(len(line.get("failed") or []) for line in lines)
    unreachable = sum(len(line.get("disconnected") or []) for line in lines)
    scheduled = sum(int(line.get("num_scheduled") or 0) for line in lines)
    see, why = "see the ClientApp errors in the log", ""
    if failures:
        why = f": {failures} scheduled devices failed or timed out ({see})"
    elif unreachable and not scheduled:
        why = (f": no device answered ({unreachable} times a device drawn available replied "
               f"with an error or not at all; {see})")  # fmt: skip
    elif not scheduled:
        why = ": none was scheduled (deadline, bandwidth or availability too tight?)"
    head = f"no device uploaded an update in any of the {len(lines)} rounds, so the model never"
    return f"{head} changed{why}"


def aggregation_failure_reason(lines: list[dict[str, Any]]) -> str | None:
    """Why the run failed to aggregate too often; None if not."""
    with_uploads = [line for line in lines if int(line.get("num_uploaded") or 0) > 0]
    failed = [line for line in with_uploads if line.get("model_kept")]
    if not failed or len(failed) <= MAX_FAILED_AGGREGATION_SHARE * len(with_uploads):
        return None
    first = failed[0]
    return (
        f"aggregation failed in {len(failed)} of the {len(with_uploads)} rounds with uploads "
        f"(allowed: at most {MAX_FAILED_AGGREGATION_SHARE:.0%}), so the model was kept instead; "
        f"round {first.get('round')}: {first.get('model_kept_reason')}"
    )


def unchanged_reason(
    rounds: int, start: Mapping[str, torch.Tensor], final: Mapping[str, torch.Tensor]
) -> str | None:
    """Why ``rounds`` rounds with uploads left the model where it was; None if they moved it."""
    keys = [k for k, v in start.items() if v.is_floating_point()]
    if not rounds or not keys:
        return None
    before, after = (
        torch.cat([m[k].detach().double().flatten() for k in keys]) for m in (start, final)
    )
    moved = float(torch.linalg.vector_norm(after - before))
    bound = ROUNDING_ULPS_PER_ROUND * rounds * torch.finfo(torch.float32).eps
    if moved > bound * float(torch.linalg.vector_norm(before)):
        return None
    return (
        f"the global model did not move over the {rounds} rounds with uploads: it changed by "
        f"less than float32 resolution ({ROUNDING_ULPS_PER_ROUND} ulps a round, relative to its "
        "norm), so every update rounds to nothing in the model's weights (a clipping norm, "
        "learning rate or step too small?)"
    )


def write_end(
    config: RunConfig,
    writer: ResultWriter,
    final_model: dict[str, torch.Tensor],
    start_model: Mapping[str, torch.Tensor],
    rounds_run: int,
) -> dict[str, Any]:
    """Write ``model.pt``, ``summary.json`` and the final status, synced; return the summary."""
    save_model(writer.dir, final_model)
    history = writer.lines
    lost = lost_counts(history)
    accs = [h["accuracy"] for h in history if h.get("accuracy") is not None]
    wemds = [h["wemd"] for h in history if h.get("wemd") is not None and np.isfinite(h["wemd"])]
    summary = {
        "policy": config.policy,
        "rounds": config.num_server_rounds,
        "final_accuracy": accs[-1] if accs else None,
        "max_accuracy": max(accs) if accs else None,
        "mean_scheduled": float(np.mean([h.get("num_scheduled", 0) for h in history] or [0])),
        "mean_wemd": float(np.mean(wemds)) if wemds else None,
        "wall_time_s": writer.elapsed_s(),
        "result_dir": str(writer.dir),
        **lost,
    }
    writer.write_summary(summary)
    last = history[-1]["round"] if history else 0
    reason = (
        no_upload_reason(history)
        or aggregation_failure_reason(history)
        or unchanged_reason(rounds_run, start_model, final_model)
    )
    state = COMPLETED if reason is None else FAILED
    status = RunStatus(state, last, config.num_server_rounds, reason=reason, **lost)
    write_status(writer.dir, status, durable=False)
    sync_run_files(writer.dir)
    say(f"results written to {writer.dir} ({reason or 'completed'}{lost_note(**lost)})")
    return summary


def train_rounds(
    grid: Grid, config: RunConfig, writer: ResultWriter, setup: RunSetup
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Run the rounds left; return the end and start models."""
    recorder = RoundRecorder(setup, writer, say)
    strategy = setup.strategy(on_record=recorder.add_record)
    grid = patient(grid, config.stall_limit_s)  # a simulation waits for every reply
    start = {k: v.detach().cpu().clone() for k, v in setup.model.state_dict().items()}
    try:
        stalled = (
            f"run stalled: no progress in {config.stall_limit_s:g} s (stall-limit-s): a policy, "
            "an aggregator or the server's own code did not return; raise stall-limit-s if it "
            "needs longer"
        )
        with stall_alarm(config.stall_limit_s, lambda: stalled):
            result = strategy.start(
                grid=grid,
                initial_arrays=ArrayRecord(start),
                num_rounds=config.num_server_rounds - setup.round_offset,
                timeout=config.train_timeout_s,
                train_config=ConfigRecord(config.training.to_config()),
                evaluate_fn=recorder,
            )
    finally:
        recorder.events.close()  # the TensorBoard event file
    # Flower's Result keeps no arrays when no round aggregated any: the model is then the start
    return (dict(result.arrays.to_torch_state_dict()) if len(result.arrays) else dict(start)), start
