"""Run-config ``aggregator``: each of Flower's strategies equals Flower run directly, bit for bit;
bad settings are refused before the start; too few uploads keep the model; resumes are exact;
robust rules withstand a sign-flip attack (:mod:`misbehaving`)."""

from __future__ import annotations

import copy
import csv
import json
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from command_batch import in_one_process
from fake_grid import app_grid, make_contexts
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.serverapp import strategy as flower_strategies
from misbehaving import misbehaving
from run_results import assert_same_run, lines
from task_settings import checkpointed_run_config

from experiments.cli import invoke
from experiments.run.inprocess import Handler, run_inprocess
from experiments.run.run_config import validated_run_config
from fedcgd_config import keys
from fedcgd_config.settings import default_run_config
from fedcgd_strategy.aggregation import fedavg
from fedcgd_strategy.flower.aggregators import (
    aggregate_uploads,
    aggregator_state,
    make_aggregator,
    noise_seed,
)
from fedcgd_task.model_record import layout, model_arrays
from server_app.app import run_federation
from server_app.checkpoint import load_checkpoint
from server_app.config import fold_policy_params, parse_run_config
from server_app.run_folder.results import MODEL_FILE

PROJECT = Path(__file__).resolve().parents[1]
V = 8
FIXED = "DifferentialPrivacyServerSideFixedClipping"
ADAPTIVE = "DifferentialPrivacyServerSideAdaptiveClipping"
NODES = [7000 + 11 * i for i in range(V)]


class Recorder:
    """The real ClientApp, keeping every training reply it sends, by round and partition."""

    def __init__(self) -> None:
        self.handler: Handler | None = None
        self.train: dict[int, dict[int, Message]] = {}

    def wrap(self, app: Handler) -> Recorder:
        """Record what ``app`` (the grid's ClientApp) replies (:func:`run`'s ``wrap``)."""
        self.handler = app
        return self

    def __call__(self, msg: Message, context: Context) -> Message:
        assert self.handler is not None, "give Recorder.wrap to run()"
        reply = self.handler(msg, context)
        if msg.metadata.message_type == "train" and not reply.has_error():
            pid = int(context.node_config["partition-id"])
            self.train.setdefault(int(msg.metadata.group_id), {})[pid] = reply
        return reply


def run(
    result_dir: Path, wrap: Callable[[Handler], Handler] | None, rounds: int = 2, **overrides: Any
) -> tuple[list[dict], dict[str, torch.Tensor]]:
    """A run whose nodes answer as the real ClientApp does (or ``wrap(it)``), cohorts on."""
    config = {**default_run_config(), "num-devices": V, "num-server-rounds": rounds}
    config |= {"policy": "all", "channel.availability-prob": 1.0, "local-steps": 2}
    config |= {"channel.deadline-s": 10.0}  # every device meets it: "all" schedules all
    config |= {"max-update-norm-ratio": 0.0, "eval-every": rounds, **overrides}
    config = fold_policy_params(config) | {"result-dir": str(result_dir)}
    grid = app_grid(make_contexts(NODES, config, V), wrap=wrap)
    run_federation(grid, parse_run_config(config))
    return lines(result_dir), torch.load(result_dir / MODEL_FILE)


@pytest.fixture(autouse=True)
def task_identity() -> None:
    """Flower's messages read the task identity a ServerApp sets: set as the engine sets it."""
    from fedcgd_strategy.flower.simulation import outside_flower

    outside_flower()


def synthetic_uploads(count: int) -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """A tiny model and ``count`` distinct uploads of it."""
    reference = {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}
    uploads = [{k: (v + 0.01 * (i + 1)).astype(v.dtype) for k, v in reference.items()}
               for i in range(count)]  # fmt: skip
    return reference, uploads


def initial_model(tmp_path: Path) -> dict[str, np.ndarray]:
    """The global model before round 1, built as the ServerApp builds it."""
    from server_app.setup import build_setup

    config = {**default_run_config(), "num-devices": V, "result-dir": str(tmp_path / "init")}
    setup = build_setup(parse_run_config(config))
    return {k: v.detach().numpy().copy() for k, v in setup.model.state_dict().items()}


CASES = [
    ("FedAvg", {}),
    ("FedMedian", {}),
    ("FedTrimmedAvg", {"beta": 0.2}),
    ("Krum", {"num-malicious-nodes": 1}),
    ("MultiKrum", {"num-malicious-nodes": 1, "num-nodes-to-select": 3}),
    ("Bulyan", {"num-malicious-nodes": 1}),
    ("FedAvgM", {"server-momentum": 0.9}),
    ("FedAdam", {"eta": 0.05}),
    ("FedYogi", {}),
]


@pytest.mark.parametrize(("name", "params"), CASES, ids=[c[0] for c in CASES])
def test_each_aggregator_equals_flower_run_directly(tmp_path, name, params):
    recorder = Recorder()
    flat = {f"aggregator-params.{k}": v for k, v in params.items()}
    lines, model = run(tmp_path / "run", recorder.wrap, aggregator=name, **flat)
    assert all(line["num_uploaded"] == V and not line["model_kept"] for line in lines)
    direct = getattr(flower_strategies, name)(**{k.replace("-", "_"): v for k, v in params.items()})
    assert_equal_models(model, flower_directly(tmp_path, recorder, direct, rounds=2))


def flower_directly(
    tmp_path: Path, recorder: Recorder, direct: Any, rounds: int, *, uniform: bool = False
) -> dict[str, np.ndarray]:
    """What Flower's strategy ``direct`` on its own makes of the recorded replies, as its
    start() loop drives it: the global model kept in its dtype (the FedOpt family answers
    float64 for a float32 model), numpy's global generator seeded per round as the run seeds
    it, every reply weighted 1 if ``uniform`` (a DP wrapper's mean)."""
    grid = app_grid(make_contexts(NODES, {}, V))
    initial = initial_model(tmp_path)
    expected, seed = initial, int(default_run_config()["seed"])
    for rnd in range(1, rounds + 1):
        replies = [copy.deepcopy(recorder.train[rnd][pid]) for pid in range(V)]
        for reply in replies:  # as Flower's own clients send a model: an Array per tensor
            named = model_arrays(reply.content[keys.ARRAYS], layout(initial))
            reply.content[keys.ARRAYS] = ArrayRecord({k: Array(v) for k, v in named.items()})
            if uniform:
                reply.content[keys.METRICS][keys.NUM_EXAMPLES] = 1
        arrays = ArrayRecord({k: Array(v) for k, v in expected.items()})
        np.random.seed(noise_seed(seed, rnd))  # noqa: NPY002
        list(direct.configure_train(rnd, arrays, ConfigRecord(), grid))
        aggregated, _ = direct.aggregate_train(rnd, replies)
        assert aggregated is not None
        expected = {k: v.numpy().astype(initial[k].dtype) for k, v in aggregated.items()}
    return expected


def assert_equal_models(model: dict[str, torch.Tensor], expected: dict[str, np.ndarray]) -> None:
    assert list(expected) == list(model)
    for key, value in model.items():
        np.testing.assert_array_equal(value.numpy(), expected[key], err_msg=key)


def test_the_default_is_the_schedulers_fedavg_bit_for_bit(tmp_path):
    """FedCGD-FSCD on the default channel: only the scheduled uploads, weighted by |D_v|."""
    recorder = Recorder()
    overrides = {"policy": "fedcgd-fscd", "channel.availability-prob": 0.6}
    lines, model = run(tmp_path / "run", recorder.wrap, rounds=1, **overrides)
    config = parse_run_config({**default_run_config(), "result-dir": str(tmp_path / "x")})
    assert config.aggregator == "" and config.aggregator_params == {}
    (line,) = lines
    assert 0 < len(line["uploaded"]) < V  # a scheduled subset
    uploads = [recorder.train[1][pid] for pid in line["uploaded"]]
    initial = initial_model(tmp_path)
    states = [model_arrays(m.content[keys.ARRAYS], layout(initial)) for m in uploads]
    weights = [int(m.content[keys.METRICS][keys.NUM_EXAMPLES]) for m in uploads]
    assert_equal_models(model, fedavg(states, weights, initial))


def refused(tmp_path: Path, **overrides: Any) -> str:
    config = fold_policy_params(
        {**default_run_config(), "num-devices": V, "result-dir": str(tmp_path), **overrides}
    )
    with pytest.raises(ValueError) as caught:
        validated_run_config(config)
    text = str(caught.value)
    assert "\n" not in text
    return text


def dp(params: dict[str, Any], aggregator: str = FIXED) -> dict[str, Any]:
    """A DP aggregator's run-config keys, ``params`` changing the defaults' (None: unset)."""
    params = {"noise-multiplier": 0.5, "clipping-norm": 1.0, **params}
    return {"aggregator": aggregator} | {
        f"aggregator-params.{k}": v for k, v in params.items() if v is not None
    }


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"aggregator": "FedMean"}, "'aggregator' = 'FedMean'; allowed"),
        ({"aggregator": "os.path:join"}, "not a subclass of flwr.serverapp.strategy.Strategy"),
        ({"aggregator": "nowhere.module:Thing"}, "no module named 'nowhere'"),
        ({"aggregator": 3}, "'aggregator' must be a string"),
        ({"aggregator-params.beta": 0.1}, "is set, but 'aggregator' is \"\""),
        ({"aggregator": "Krum", "aggregator-params.fraction-train": 0.5},
         "aggregator-params.fraction-train: not settable here"),
        ({"aggregator": "Krum", "aggregator-params.num-malicious": 1},
         "aggregator 'Krum' takes no parameter 'num_malicious'; allowed: num-malicious-nodes"),
        ({"aggregator": "Bulyan", "aggregator-params.num-malicious-nodes": 2},
         "Bulyan needs 4 f + 3 uploads, f = num-malicious-nodes = 2, more than num-devices = 8"),
        ({"aggregator": "Krum", "aggregator-params.num-malicious-nodes": 3},
         "Krum needs 2 f + 3 uploads, f = num-malicious-nodes = 3, more than num-devices = 8"),
        ({"aggregator": "QFedAvg"}, "needs a value for 'client_learning_rate'"),
        ({"aggregator": "DifferentialPrivacyClientSideFixedClipping"},
         "client-side clipping needs the clients' fixedclipping_mod"),
        ({"aggregator": "FedProx"}, "FedProx changes the clients' training"),
        ({"aggregator": "FedAvg", "aggregator-params": "{beta = "}, "not a TOML inline table"),
        ({"aggregator": "Bulyan", "aggregator-params.selection-rule": "x"},
         "Bulyan' cannot take a value for 'selection_rule' from a run config"),
        # DP wrappers: their own parameters and the strategy they wrap
        (dp({"clipping-norm": None}), "needs a value for 'clipping_norm': set run-config key "
         "aggregator-params.clipping-norm"),
        (dp({"num-sampled-clients": 4}), "aggregator-params.num-sampled-clients: not settable "
         "here (set every round to the round's number of uploads"),
        (dp({"accountant": "rdp"}), "aggregator-params.accountant: not settable here"),
        (dp({"strategy": "FedMean"}), "'aggregator-params.strategy' = 'FedMean'; allowed: a "
         "Flower"),
        (dp({"strategy": 3}), "aggregator-params.strategy = 3 with aggregator-params.strategy-"
         "params = {}; allowed: a strategy that aggregates"),
        (dp({"strategy": ADAPTIVE}), f"strategy = '{ADAPTIVE}' with aggregator-params.strategy-"
         "params = {}; allowed: a strategy that aggregates (FedAvg, FedTrimmedAvg, ...)"),
        (dp({"strategy": "FedProx"}), "FedProx changes the clients' training"),
        (dp({"strategy-params.beta": 0.2}), "aggregator-params.strategy-params.beta: aggregator "
         "'FedAvg' takes no parameter 'beta'"),
        (dp({"strategy-params": 3}), "aggregator-params.strategy-params = 3; "
         "allowed: a strategy that aggregates"),
        (dp({"strategy": "Krum", "strategy-params.num-malicious-nodes": 3}),
         "Krum needs 2 f + 3 uploads, f = num-malicious-nodes = 3, more than num-devices = 8"),
        (dp({"strategy": "FedAvg", "strategy-params.fraction-train": 0.5}),
         "aggregator-params.strategy-params.fraction-train: not settable here"),
        # Flower: z must stay below 2 x clipped-count-stddev (default num_sampled_clients / 20)
        (dp({"noise-multiplier": 1.0, "clipping-norm": None}, ADAPTIVE),  # V = 8: z < 0.8
         "(num-devices = 8): ValueError: If not specified, `clipped_count_stddev`"),
    ],
)  # fmt: skip
def test_bad_aggregator_settings_are_refused_before_the_start(tmp_path, overrides, expected):
    assert expected in refused(tmp_path, **overrides)


def test_too_few_uploads_keep_the_model_and_say_so(tmp_path):
    lines, _ = run(
        tmp_path / "run", None, rounds=6, policy="fedcgd-fscd", aggregator="Bulyan",
        **{"aggregator-params.num-malicious-nodes": 1, "channel.availability-prob": 0.7},
    )  # fmt: skip
    few = [x for x in lines if 0 < x["num_uploaded"] < 7]
    enough = [x for x in lines if x["num_uploaded"] >= 7]
    assert few, "the test needs a round with fewer than 4 f + 3 = 7 uploads"
    for line in few:
        reason = f"too few uploads for Bulyan: {line['num_uploaded']} < 7"
        assert line["model_kept"] and line["model_kept_reason"].startswith(reason)
    assert all(not x["model_kept"] for x in enough)


@pytest.mark.parametrize(
    ("name", "params", "size", "poison"),
    [
        ("FedAvgM", {"server-momentum": 0.9}, 0.01, np.inf),
        # FedAdam's v_t overflows to inf on finite float32 uploads (a diverging run); the failed
        # round puts that state back as it was instead of refusing it as a checkpoint's
        ("FedAdam", {}, 2e19, np.nan),
    ],
)
def test_a_failed_round_leaves_the_aggregators_state_as_it_was(name, params, size, poison):
    aggregator = make_aggregator(name, params, 3)[0]
    reference, models = synthetic_uploads(3)
    models = [{k: (v * size / 0.01).astype(v.dtype) for k, v in m.items()} for m in models]
    first, reason = aggregate_uploads(aggregator, 1, models, [1, 1, 1], reference)
    assert first is not None and reason is None
    before = aggregator_state(aggregator)
    if name == "FedAdam":
        assert np.isinf(before["v_t"]["w"]).all()
    poisoned = [{k: np.full_like(v, poison) for k, v in models[0].items()}, *models[1:]]
    result, reason = aggregate_uploads(aggregator, 2, poisoned, [1, 1, 1], first)
    assert result is None and "not finite" in str(reason)
    np.testing.assert_equal(aggregator_state(aggregator), before)
    # (a restored state continuing exactly: tests/test_checkpoint_identity.py)


class CountsItsRounds(flower_strategies.FedAvg):
    """A researcher's strategy whose state_dict() hands out an array it changes in place."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = np.zeros(1)

    def state_dict(self) -> dict[str, Any]:
        return {"seen": self.seen}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.seen = np.array(state["seen"])

    def aggregate_train(self, server_round, replies):
        self.seen += 1
        raise RuntimeError("boom")


def test_a_failed_round_puts_back_a_researchers_state_changed_in_place():
    aggregator, model = CountsItsRounds(), {"w": np.zeros(2, np.float32)}
    result, reason = aggregate_uploads(aggregator, 1, [model, model], [1, 1], model)
    assert result is None and reason.startswith("CountsItsRounds.aggregate_train raised Runtime")
    assert aggregator.seen.tolist() == [0.0]


ADAPTIVE_DP = {  # Flower's adaptive clipping around FedAvgM: the clipping norm and momentum
    "noise-multiplier": 0.3,
    "initial-clipping-norm": 0.5,
    "strategy": "FedAvgM",
    "strategy-params.server-momentum": 0.9,
}


@pytest.mark.parametrize(
    ("name", "params"),
    [
        ("FedAdam", {"eta": 0.05}),
        ("FedAvgM", {"server-momentum": 0.9}),
        ("DifferentialPrivacyServerSideAdaptiveClipping", ADAPTIVE_DP),
    ],
    ids=["FedAdam", "FedAvgM", "DP-adaptive"],
)
def test_a_resumed_run_with_a_stateful_aggregator_equals_the_uninterrupted_one(
    tmp_path, name, params
):
    def config(result_dir: Path, rounds: int, **changes: Any) -> dict:
        overrides = {"num-devices": 10, "num-server-rounds": rounds, "aggregator": name}
        overrides |= {f"aggregator-params.{k}": v for k, v in params.items()}
        return checkpointed_run_config(result_dir, **(overrides | changes))

    whole, part = tmp_path / "whole", tmp_path / "part"
    run_inprocess(config(whole, 4))
    run_inprocess(config(part, 2))
    state = load_checkpoint(part).aggregator_state  # the state went into the checkpoint
    assert state
    if "clipping_norm" in state:  # it moved: resuming from the initial one would differ
        assert state["clipping_norm"] != ADAPTIVE_DP["initial-clipping-norm"]
    run_inprocess(config(part, 4, **{"resume-from": str(part)}))
    assert_same_run(part, whole, rounds=4)


ATTACK_ROUNDS = 12
ROBUST = {
    "FedMedian": {},
    "FedTrimmedAvg": {"beta": 0.2},
    "Krum": {"num-malicious-nodes": 1},
    "Bulyan": {"num-malicious-nodes": 1},
}


@pytest.fixture(scope="module")
def attacked(tmp_path_factory) -> dict[tuple[str, bool], float]:
    """Final accuracy of 'all' on 8 near-IID devices by (aggregator, device 0 attacking);
    "FedAvg" is the scheduler's (the default)."""
    root = tmp_path_factory.mktemp("attack")
    out = {}
    for label, params in [("FedAvg", {}), *ROBUST.items()]:
        for attack in (False, True):
            lines, _ = run(
                root / f"{label}-{attack}",
                (lambda app: misbehaving(app, "sign-flip-x5", 0)) if attack else None,
                rounds=ATTACK_ROUNDS,
                aggregator="" if label == "FedAvg" else label,
                **{"local-steps": 5, "max-update-norm-ratio": 10.0, "dirichlet-alpha": 100.0},
                **{f"aggregator-params.{k}": v for k, v in params.items()},
            )
            # the attacker passes the norm screen (its update has an honest size)
            assert sum(0 in x["uploaded"] for x in lines) >= ATTACK_ROUNDS // 2
            out[label, attack] = lines[-1]["accuracy"]
    return out


@pytest.mark.parametrize("aggregator", list(ROBUST))
def test_the_attack_breaks_the_schedulers_fedavg_and_a_robust_aggregator_withstands_it(
    attacked, aggregator
):
    assert attacked["FedAvg", True] < attacked["FedAvg", False] - 0.3
    assert attacked[aggregator, True] > attacked["FedAvg", True] + 0.3
    assert attacked[aggregator, True] > attacked[aggregator, False] - 0.1


def readme_command(start: str) -> list[str]:
    """The README command starting with ``start`` (exactly one)."""
    from test_readme_commands import readme_commands

    (found,) = {c for c in readme_commands() if c.startswith(start)}
    return shlex.split(found)


def run_readme_attack_sweep(start: str, out: Path, *extra: str) -> list[str]:
    """Run the README's attack sweep starting with ``start`` (seed 0, ``--out out``, ``extra``
    added) with this environment's Python; assert that it exits with 0; its words."""
    words = readme_command(start)
    words[words.index("--seeds") + 1] = "0"
    words[words.index("--out") + 1] = str(out)
    assert words[0] == ".venv/bin/python", words
    command = [sys.executable, *words[1:], *extra]
    proc = subprocess.run(command, cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return words


def test_readme_inprocess_aggregator_commands_run(tmp_path):
    """Both README commands (Krum, DP fixed clipping) in one child process (command_batch.py);
    8 devices, each uploading every round (as the documented 40 give Krum its 2 f + 3 = 5
    uploads; with 8 and FedCGD-FSCD most rounds have fewer, and the run fails)."""
    expected = {
        "Krum": {"num-malicious-nodes": 1},
        FIXED: {"noise-multiplier": 0.3, "clipping-norm": 0.5},
    }
    argvs = []
    for aggregator in expected:
        words = readme_command(
            f".venv/bin/fedcgd inprocess --run-config \"aggregator='{aggregator}'"
        )
        at = words.index("--run-config") + 1
        words[at] += (
            " num-devices=8 policy='all' channel.availability-prob=1.0 channel.deadline-s=10.0"
        )
        argvs.append([*words[1:], "--out", str(tmp_path / aggregator)])
    for done in in_one_process(argvs):
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for aggregator, params in expected.items():
        (folder,) = [p for p in (tmp_path / aggregator).iterdir() if p.is_dir()]
        config = json.loads((folder / "config.json").read_text())
        assert config["aggregator"] == aggregator and config["aggregator_params"] == params
        written = lines(folder)
        assert len(written) == 3 and not any(x["model_kept"] for x in written)


def test_readme_attack_sweep_command_runs(tmp_path):
    small = ["--rounds", "1", "--policies", "all", "--aggregators", "FedAvg,Krum"]
    run_readme_attack_sweep(
        ".venv/bin/python tests/attack_sweep.py --seeds", tmp_path, *small, "--attackers", "0,1"
    )
    with (tmp_path / "table.csv").open() as handle:
        table = list(csv.DictReader(handle))
    assert {(r["aggregator"], r["attackers"]) for r in table} == {
        (a, k) for a in ("FedAvg", "Krum") for k in ("0", "1")
    }
    assert (tmp_path / "attack.png").exists()
    # without attackers no round counts as an attacker's
    with (tmp_path / "runs.csv").open() as handle:
        runs = list(csv.DictReader(handle))
    assert all(int(r["attacker_rounds"]) == 0 for r in runs if r["attackers"] == "0")


def test_compare_policies_sweeps_aggregators_and_refuses_a_bad_one_before_any_run(tmp_path, capsys):
    out = tmp_path / "refused"
    args = ["--aggregators", "default,Bulyan", "--engine", "inprocess", "--out", str(out)]
    code = invoke(
        ["compare", *args, "--run-config", "num-devices=6 aggregator-params.num-malicious-nodes=1"]
    )
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: run-config key") and "\n" not in err
    assert not out.exists()
    out = tmp_path / "compare"
    args = "--aggregators default,FedTrimmedAvg --policies fedcgd-fscd,all --engine inprocess"
    settings = ["--run-config", "num-server-rounds=2 num-devices=6"]
    assert invoke(["compare", *args.split(), *settings, "--out", str(out)]) == 0
    for folder, recorded in (
        ("aggregator=default", ""),
        ("aggregator=FedTrimmedAvg", "FedTrimmedAvg"),
    ):
        with (out / folder / "table.csv").open() as handle:
            assert {r["policy"] for r in csv.DictReader(handle)} == {"fedcgd-fscd", "all"}
        for policy in ("fedcgd-fscd", "all"):
            config = json.loads((out / folder / policy / "seed-0" / "config.json").read_text())
            assert config["aggregator"] == recorded
