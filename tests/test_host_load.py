"""Host load never changes a simulated run (no reply for ``stall-limit-s``: one line); a
deployment counts the devices it loses in every file, the last line and the comparison tables."""

from __future__ import annotations

import inspect
import json
import threading
import time
from pathlib import Path

from fake_grid import app_grid, make_contexts
from flower_simulation import run_simulated
from flwr.app import ConfigRecord, Message, RecordDict
from run_results import comparable, lines, same_model
from task_settings import all_available_run
from test_resume_command import run_config_text

from client_app.app import app as client_app
from experiments.cli import invoke
from experiments.compare.results import summarise, table_rows
from fedcgd_config import keys
from fedcgd_config.settings import default_run_config
from fedcgd_strategy.flower.simulation import PatientGrid, SimulationStalledError, stall_alarm
from server_app.app import run_federation, wait_for_nodes
from server_app.config import parse_run_config
from server_app.run_folder.run_status import read_status, run_outcome

V, ROUNDS, SLOW = 4, 3, 1
#: The timeouts of the run, and how long the host holds each message of the slow device.
TIMEOUT_S, HOLD_S = 0.2, 1.0
NODES = [7000 + 11 * i for i in range(V)]


def run_config(folder: Path, **extra) -> dict:
    """FedCGD-FSCD (a query phase, then training) with every device available and feasible."""
    settings = {"local-steps": 2, "channel.deadline-s": 1.0, **extra}
    return {**default_run_config(), **all_available_run(folder, V, ROUNDS, settings)}


def hold_slow_device(pid: int, message_type: str, server_round: int) -> float:
    return HOLD_S if pid == SLOW else 0.0


def test_a_device_held_back_past_every_timeout_changes_nothing_in_a_simulation(
    tmp_path, monkeypatch
):
    timeouts = {"query-timeout-s": TIMEOUT_S, "train-timeout-s": TIMEOUT_S}
    slowed, plain = tmp_path / "slowed", tmp_path / "plain"
    assert run_simulated(monkeypatch, run_config(slowed, **timeouts), hold_slow_device) is None
    assert run_simulated(monkeypatch, run_config(plain)) is None
    slow_lines = lines(slowed)
    assert [x["round"] for x in slow_lines] == list(range(1, ROUNDS + 1))
    for line in slow_lines:  # the slow device took part in every round, as all the others
        assert SLOW in line["uploaded"] and line["uploaded"] == line["scheduled"], line
        assert line["failed"] == [] and line["lost"] == [] and line["devices_lost"] == 0
    assert comparable(slowed) == comparable(plain)
    assert same_model(slowed, plain)
    assert json.loads((slowed / "summary.json").read_text())["devices_lost"] == 0


def test_a_stuck_simulated_run_stops_with_one_line(tmp_path, monkeypatch):
    def stuck(pid: int, message_type: str, server_round: int) -> float:
        return 3.0 if pid == SLOW and message_type == "train" and server_round == 2 else 0.0

    folder = tmp_path / "stuck"
    err = run_simulated(monkeypatch, run_config(folder, **{"stall-limit-s": 1.0}), stuck)
    assert isinstance(err, SimulationStalledError)
    text = str(err)
    assert "\n" not in text and text.startswith("simulation stalled: no reply in 1 s")
    assert "stall-limit-s" in text and "train message(s) of round 2" in text
    status = read_status(folder)
    assert status is not None and status.state == "failed" and status.reason == text
    assert status.last_round == 1 and status.devices_lost == 0
    outcome = run_outcome(folder, 0.0)
    assert outcome.code == 1 and outcome.message == f"failed: {text}"


def test_a_message_the_link_drops_stops_a_simulation_in_one_line(tmp_path, monkeypatch):
    def ask_one_node_briefly(grid):
        wait_for_nodes(grid, V, timeout_s=120)
        node = sorted(grid.get_node_ids())[0]
        content = RecordDict({keys.CONFIG: ConfigRecord({keys.SERVER_ROUND: 1})})
        message = Message(content, dst_node_id=node, message_type=keys.QUERY_INFO, ttl=0.5)
        return PatientGrid(grid, stall_limit_s=60.0).send_and_receive([message])

    config = run_config(tmp_path / "x")  # each reply 2 s: past the time to live
    err = run_simulated(monkeypatch, config, lambda *_: 2.0, server_main=ask_one_node_briefly)
    assert isinstance(err, SimulationStalledError), err
    assert str(err).startswith("simulation stalled: the link dropped the message to node ")
    assert "\n" not in str(err)


def stuck_client_app(message, context):
    """The project's ClientApp, stuck (a long sleep) on the ``train`` of device SLOW in round 2."""
    server_round = message.content.config_records[keys.CONFIG][keys.SERVER_ROUND]
    if message.metadata.message_type == "train" and server_round == 2:
        if context.node_config["partition-id"] == SLOW:
            time.sleep(600)
    return client_app(message, context)


def test_the_inprocess_command_stops_a_stuck_run_with_exit_1_and_one_line(
    tmp_path, monkeypatch, capsys
):
    import client_app.app

    monkeypatch.setattr(client_app.app, "make_app", lambda cohorts=None: stuck_client_app)
    values = {"num-devices": V, "num-server-rounds": ROUNDS, "channel.availability-prob": 1.0,
              "channel.deadline-s": 1.0, "stall-limit-s": 1.0, "checkpoint-every": 1}  # fmt: skip
    config = run_config_text(values)
    code = invoke(["inprocess", "--per-device", "--out", str(tmp_path), "--run-config", config])
    out, err = capsys.readouterr()  # returned: the 600 s sleep was cut short
    assert code == 1, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    failed, last = err.strip().splitlines()[-2:]
    assert failed.startswith("failed: simulation stalled: no reply in 1 s"), failed
    assert "train message(s) of round 2" in failed and "stall-limit-s" in failed
    assert last.startswith("to continue after round 1 of 3: "), last
    folder = Path(out.splitlines()[0].removeprefix("result folder: "))
    status = read_status(folder)
    assert status is not None and status.state == "failed" and status.last_round == 1


def test_a_deployment_counts_the_devices_it_lost(tmp_path):
    config = run_config(tmp_path / "lost")
    silent = NODES[SLOW]  # times out in every round (discovery included)
    grid = app_grid(make_contexts(NODES, config, V), silent=[silent])
    t0 = time.time()
    run_federation(grid, parse_run_config(config))
    folder = Path(config["result-dir"])
    written = lines(folder)
    # drawn available every round, never discovered: lost (as disconnected) in every round
    for line in written:
        assert line["lost"] == [SLOW] and line["devices_lost"] == 1
        assert SLOW in line["disconnected"]
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["devices_lost"] == ROUNDS and summary["rounds_with_lost_devices"] == ROUNDS
    status = read_status(folder)
    assert status is not None and status.state == "completed"
    assert (status.devices_lost, status.rounds_with_lost_devices) == (ROUNDS, ROUNDS)
    outcome = run_outcome(folder, t0)
    assert outcome.code == 0
    assert outcome.message == (
        f"completed: {ROUNDS} rounds, results in {folder}; {ROUNDS} device-round(s) lost to "
        f"timeouts, disconnections or errors in {ROUNDS} round(s) (metrics.jsonl 'lost')"
    )

    # the comparison tables flag it (their columns and marker: test_compare_policies)
    row = summarise(folder, seed=0)
    assert row["devices_lost"] == ROUNDS and table_rows([row])[0]["runs_with_lost_devices"] == 1


def test_an_error_reply_is_a_lost_device_and_a_refused_reply_is_not(tmp_path):
    from misbehaving import misbehaving

    config = run_config(tmp_path / "errors")

    def raising_in_round_2(app):
        def handle(message, context):
            cfg = message.content.config_records[keys.CONFIG]
            if context.node_config["partition-id"] == SLOW and cfg[keys.SERVER_ROUND] == 2:
                raise RuntimeError("the device crashed")
            return app(message, context)

        return handle

    grid = app_grid(make_contexts(NODES, config, V), wrap=raising_in_round_2)
    run_federation(grid, parse_run_config(config))
    assert [x["lost"] for x in lines(tmp_path / "errors")] == [[], [SLOW], []]

    refused = run_config(tmp_path / "refused")
    contexts = make_contexts(NODES, refused, V)
    grid = app_grid(contexts, wrap=lambda app: misbehaving(app, "nan-array", SLOW))
    run_federation(grid, parse_run_config(refused))
    written = lines(tmp_path / "refused")
    assert all(SLOW in x["failed"] for x in written)
    assert [x["devices_lost"] for x in written] == [0] * ROUNDS


def test_the_stall_alarm_stops_code_stuck_in_a_thread_that_is_not_the_main_one():
    # Flower's simulation runs the ServerApp in a thread, where SIGALRM cannot ring: a watcher
    # thread raises in it (issue 51: one run-level stall limit instead of a thread per call)
    caught: list[BaseException] = []

    def stuck_policy() -> None:
        while True:
            pass

    def server() -> None:
        try:
            with stall_alarm(1.0, lambda: "run stalled"):
                stuck_policy()
        except SimulationStalledError as err:
            caught.append(err)

    thread = threading.Thread(target=server, daemon=True)  # on old code: never stopped
    thread.start()
    thread.join(30)
    first = inspect.getsourcelines(stuck_policy)[1]
    assert not thread.is_alive() and len(caught) == 1
    assert str(caught[0]) in {
        f"run stalled (stuck at test_host_load.py:{first + k} in stuck_policy)" for k in (1, 2)
    }
