"""Inputs found by an adversarial review: each refused in one line or costing only its device."""

from __future__ import annotations

import io
import json
from collections.abc import Iterable
from copy import deepcopy
from pathlib import Path

import numpy as np
import pytest
from fake_grid import FakeGrid, make_contexts
from flwr.app import Array, Message

from channel import CellConfig
from client_app.app import app as client_app
from experiments.cli import invoke
from experiments.compare.execution import run_policies
from experiments.compare.plans import check_policies
from experiments.run.run_config import format_run_config
from fedcgd_config import keys
from fedcgd_config.settings import default_run_config
from server_app.app import run_federation
from server_app.config import parse_run_config
from server_app.run_folder.results import METRICS_FILE

V = 6
NODES = [9000 + 13 * i for i in range(V)]


def run(tmp_path: Path, grid_type: type[FakeGrid], handler=client_app) -> list[dict]:
    config = default_run_config()
    config.update({"num-devices": V, "num-server-rounds": 3, "channel.availability-prob": 0.8})
    config["result-dir"] = str(tmp_path / "run")
    grid = grid_type({n: handler for n in NODES}, make_contexts(NODES, config, V))
    run_federation(grid, parse_run_config(config))
    return [json.loads(x) for x in (tmp_path / "run" / METRICS_FILE).read_text().splitlines()]


@pytest.mark.parametrize(
    ("values", "said"),
    [({"seed": 2**64}, ["'seed'", str(2**63 - 1)]),
     ({"result-dir": "/proc/fedcgd-run"}, ["'result-dir'", "cannot be created"])],
)  # fmt: skip
def test_a_seed_beyond_64_bits_or_a_result_dir_nobody_can_create_is_refused_in_one_line(
    capsys, tmp_path, values, said
):
    values = {"num-server-rounds": 1, "result-dir": str(tmp_path / "r"), **values}
    code = invoke(["inprocess", "--run-config", format_run_config(values)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and all(x in err[0] for x in said), err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    ("field", "value"),
    [("tx_power_dbm", 4000.0), ("tx_power_dbm", -1e300), ("noise_psd_dbm_per_hz", 1e300),
     ("noise_figure_db", 1e300), ("radius_m", 1e300), ("h_ut_m", 1e300)],
)  # fmt: skip
def test_channel_values_whose_powers_or_areas_overflow_are_refused(field, value):
    with pytest.raises(ValueError, match=field):
        CellConfig(**{field: value})


def test_a_comparison_refuses_repeated_policies_and_its_own_result_dir(tmp_path):
    with pytest.raises(ValueError, match="repeats bc"):
        check_policies(["bc", "bc"])
    with pytest.raises(ValueError, match="'result-dir'"):
        run_policies(["bc"], {"result-dir": str(tmp_path / "x")}, tmp_path / "out")


class TwiceGrid(FakeGrid):
    """Partition 1's node answers every message twice: its real reply, then a corrupted copy."""

    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        replies: list[Message] = []
        for msg in messages:
            answer = list(super().send_and_receive([msg], timeout=timeout))
            replies += answer
            for reply in answer:
                if msg.metadata.dst_node_id == NODES[1] and not reply.has_error():
                    copy = Message(deepcopy(reply.content), reply_to=msg)
                    if keys.METRICS in copy.content.metric_records:
                        copy.content.metric_records[keys.METRICS][keys.LABEL_HIST] = [0.5]
                    replies.append(copy)
        return replies


def test_only_the_first_reply_of_a_node_counts(tmp_path):
    lines = run(tmp_path, TwiceGrid)
    for line in lines:
        assert not set(line["uploaded"]) & set(line["failed"]), line["round"]
    assert any(1 in line["uploaded"] for line in lines)


def test_a_client_app_that_returns_no_message_costs_only_its_device(tmp_path):
    def handler(msg, context):
        if int(context.node_config["partition-id"]) == 1:
            return "not a message"
        return client_app(msg, context)

    lines = run(tmp_path, FakeGrid, handler)
    assert [x["round"] for x in lines] == [1, 2, 3]
    assert all(1 not in x["uploaded"] for x in lines)
    assert any("returned str" in json.dumps(x["discovery_failed"]) for x in lines)


def test_a_refused_discovery_reply_is_recorded_in_the_round_line(tmp_path):
    def handler(msg, context):
        reply = client_app(msg, context)
        if int(context.node_config["partition-id"]) == 1 and msg.metadata.message_type == (
            keys.QUERY_INFO
        ):
            reply.content.metric_records[keys.METRICS][keys.PARTITION_ID] = 1.0
        return reply

    lines = run(tmp_path, FakeGrid, handler)
    reasons = lines[0]["discovery_failed"]
    assert list(reasons) == [str(NODES[1])] and "'partition-id' = 1.0" in reasons[str(NODES[1])]
    assert all(1 not in x["uploaded"] for x in lines)


NPZ = io.BytesIO()
np.savez(NPZ, x=np.zeros(1))  # np.load reads it as an NpzFile, not an array


@pytest.mark.parametrize("data", [b"", b"\x93NUMPY junk", b"\x80\x04pickled", NPZ.getvalue()])
def test_an_upload_whose_bytes_numpy_cannot_read_costs_only_its_device(tmp_path, data):
    def handler(msg, context):
        reply = client_app(msg, context)
        if int(context.node_config["partition-id"]) == 1 and keys.ARRAYS in reply.content:
            record = reply.content.array_records[keys.ARRAYS]
            name, array = next(iter(record.items()))
            record[name] = Array(array.dtype, array.shape, array.stype, data)
        return reply

    lines = run(tmp_path, FakeGrid, handler)
    assert [x["round"] for x in lines] == [1, 2, 3]
    refusals = [x["failed_reasons"] for x in lines if 1 in x["failed"]]
    assert refusals and all(1 not in x["uploaded"] for x in lines)
    assert all("is unreadable: " in json.dumps(r) and "\\n" not in json.dumps(r) for r in refusals)
