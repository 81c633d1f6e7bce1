"""Flower's server-side DP wrappers: each equals Flower run directly (adaptive clipping by
Andrew et al.'s rule, which Flower 1.42 reverses); hand-computed clipped means, noise and
clipping norms; the noise depends on the seed and round only."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord
from flwr.serverapp import strategy as flower_strategies
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.supercore.differential_privacy import add_gaussian_noise_inplace
from layer_cases import REL64
from run_results import lines
from test_aggregators import (  # noqa: F401  (task_identity: a fixture)
    ADAPTIVE,
    FIXED,
    Recorder,
    V,
    assert_equal_models,
    flower_directly,
    initial_model,
    run,
    run_readme_attack_sweep,
    task_identity,
)

from experiments.run.inprocess import run_inprocess
from experiments.run.run_config import validated_run_config
from fedcgd_config import keys
from fedcgd_strategy.flower.aggregators import (
    aggregate_uploads,
    dp_round_noise,
    make_aggregator,
    noise_seed,
)
from fedcgd_strategy.flower.replies import update_norm
from fedcgd_task.model_record import layout, model_arrays
from server_app.run_folder.results import MODEL_FILE

#: About the median update norm of the 8 devices' first rounds (0.18 .. 0.31): some clipped.
CLIP = 0.25
ROUNDS = 3

CASES = [
    ("fixed", FIXED, {"noise-multiplier": 0.5, "clipping-norm": CLIP}, "FedAvg", {}),
    ("adaptive", ADAPTIVE, {"noise-multiplier": 0.5, "initial-clipping-norm": CLIP}, "FedAvg", {}),
    ("fixed-trimmed", FIXED, {"noise-multiplier": 0.5, "clipping-norm": CLIP}, "FedTrimmedAvg",
     {"beta": 0.2}),
]  # fmt: skip


class PaperRule(DifferentialPrivacyServerSideAdaptiveClipping):
    """Flower's adaptive wrapper with Andrew et al.'s Algorithm 1 (arXiv:1905.03871): noise std
    z C / n with the C it clipped with, then C <- C exp(-eta (b - gamma)), b the fraction not
    clipped, gamma the target fraction not clipped."""

    def aggregate_train(self, server_round, replies):
        self.clipped_with = self.clipping_norm
        return super().aggregate_train(server_round, replies)

    def _geometric_update(self, clipped_fraction: float) -> None:
        b, gamma = 1.0 - clipped_fraction, 1.0 - self.target_clipped_quantile
        self.clipping_norm = self.clipping_norm * math.exp(-self.clip_norm_lr * (b - gamma))

    def _add_noise_to_aggregated_arrays(self, aggregated: ArrayRecord) -> ArrayRecord:
        nds = aggregated.to_numpy_ndarrays()
        std = self.noise_multiplier * self.clipped_with / self.num_sampled_clients
        add_gaussian_noise_inplace(nds, std)  # Flower's draw
        return ArrayRecord({k: Array(np.asarray(v)) for k, v in zip(aggregated, nds, strict=True)})


@pytest.mark.parametrize(
    ("wrapper", "params", "inner", "inner_params"),
    [c[1:] for c in CASES],
    ids=[c[0] for c in CASES],
)
def test_the_dp_aggregator_equals_flowers_wrapper_run_directly(
    tmp_path, wrapper, params, inner, inner_params
):
    recorder = Recorder()
    flat = {f"aggregator-params.{k}": v for k, v in params.items()}
    flat["aggregator-params.strategy"] = inner
    flat.update({f"aggregator-params.strategy-params.{k}": v for k, v in inner_params.items()})
    lines, model = run(tmp_path / "run", recorder.wrap, rounds=ROUNDS, aggregator=wrapper, **flat)
    assert all(line["num_uploaded"] == V and not line["model_kept"] for line in lines)
    initial = initial_model(tmp_path)
    uploads = [recorder.train[1][pid].content[keys.ARRAYS] for pid in range(V)]
    norms = [update_norm(model_arrays(u, layout(initial)), initial) for u in uploads]
    assert min(norms) < CLIP < max(norms)  # clipping changed some uploads and not others
    wrapped = getattr(flower_strategies, inner)(**{k.replace("-", "_"): v for k, v in
                                                   inner_params.items()})  # fmt: skip
    own = {k.replace("-", "_"): v for k, v in params.items()}
    flower_class = PaperRule if wrapper == ADAPTIVE else getattr(flower_strategies, wrapper)
    direct = flower_class(wrapped, num_sampled_clients=V, **own)
    expected = flower_directly(tmp_path, recorder, direct, ROUNDS, uniform=True)
    assert_equal_models(model, expected)


def hand_round() -> tuple[dict[str, np.ndarray], list[dict[str, np.ndarray]], list[int]]:
    """Global model w = (1, 1), b = (0); three uploads whose updates have norms 5, 0.5 and 2."""
    reference = {"w": np.array([1.0, 1.0], np.float32), "b": np.array([0.0], np.float32)}
    updates = [((3.0, 4.0), (0.0,)), ((0.0, 0.0), (0.5,)), ((0.0, -2.0), (0.0,))]
    models = [{"w": reference["w"] + np.array(w, np.float32),
               "b": reference["b"] + np.array(b, np.float32)} for w, b in updates]  # fmt: skip
    return reference, models, [1, 100, 7]  # |D_v| very unequal: DP weighs every upload 1


def noisy(seed: int, server_round: int = 1) -> dict[str, np.ndarray]:
    aggregator = make_aggregator(FIXED, {"noise-multiplier": 1.0, "clipping-norm": 1.0}, 3)[0]
    reference, models, weights = hand_round()
    result, _ = aggregate_uploads(aggregator, server_round, models, weights, reference, seed=seed)
    assert result is not None
    return result


def test_the_noise_depends_on_the_seed_and_the_round_only_and_adaptive_noise_is_accepted():
    np.random.seed(1)  # noqa: NPY002
    first = noisy(7)
    np.random.seed(2)  # noqa: NPY002  another global state before the call: the same noise
    state = np.random.get_state()  # noqa: NPY002
    again = noisy(7)
    after = np.random.get_state()  # noqa: NPY002  ... and the global state is put back
    assert state[0] == after[0] and np.array_equal(state[1], after[1]) and state[2:] == after[2:]
    assert all(np.array_equal(first[k], again[k]) for k in first)
    for other in (noisy(8), noisy(7, server_round=2)):
        assert all(not np.array_equal(first[k], other[k]) for k in first)
    # and it is noise: std z C / n = 1/3 around the clipped mean (1.2, 0.933, 0.167)
    assert not np.allclose(first["w"], [1.2, 1.0 - 0.2 / 3], atol=1e-3)
    # adaptive noise within what its clipped count allows is accepted (refused at the default
    # clipped-count-stddev: test_bad_aggregator_settings_are_refused)
    flat = {"aggregator-params.noise-multiplier": 1.0}  # V = 8: stddev 0.4, z < 0.8
    flat["aggregator-params.clipped-count-stddev"] = 1.0
    config = validated_run_config({"num-devices": V, "aggregator": ADAPTIVE, **flat})
    assert config["aggregator"] == ADAPTIVE


@pytest.mark.parametrize(
    ("wrapper", "zero", "params", "devices", "z_updates"),
    [
        # built for 40 devices, a round of 3 uploads gets noise of std z C / 3, not z C / 40
        (FIXED, {"noise-multiplier": 0.0, "clipping-norm": 1.0},
         {"noise-multiplier": 1.0, "clipping-norm": 1.0}, 40, 1.0),
        # Flower splits z between the clipped count (std sigma_b = 2) and the updates:
        # z' = (z^-2 - (2 sigma_b)^-2)^-1/2 (Andrew et al., Theorem 1), 1.0328 at z = 1
        (ADAPTIVE, {"noise-multiplier": 0.0, "initial-clipping-norm": 1.0},
         {"noise-multiplier": 1.0, "initial-clipping-norm": 1.0, "clip-norm-lr": 1.0,
          "clipped-count-stddev": 2.0}, 3, (1.0 - 1.0 / 16) ** -0.5),
    ],
    ids=["fixed", "adaptive"],
)  # fmt: skip
def test_zero_noise_is_the_clipped_mean_and_the_noise_is_std_z_c_over_the_rounds_uploads(
    wrapper, zero, params, devices, z_updates
):
    """An integer counter passes (Flower scales a clipped update in place, which numpy refuses
    for integers: it goes to Flower as float64). The noise: the adaptive wrapper's noisy
    clipped count first, then one ``np.random.normal(0, std, shape)`` per array in order; it
    uses C_0 = 1 although C has moved for the next round (lr = 1: C_1 = exp(-(b - 1/2)))."""
    aggregator = make_aggregator(wrapper, zero, num_devices=3)[0]
    attributes = set(vars(aggregator))
    reference, models, weights = hand_round()
    reference["count"] = np.array([4], np.int64)
    models = [{**m, "count": np.array([4], np.int64)} for m in models]  # norms stay 5, 0.5, 2
    result, reason = aggregate_uploads(aggregator, 1, models, weights, reference)
    assert reason is None and result is not None
    # clipped to norm 1: (3, 4, 0) -> (0.6, 0.8, 0); (0, 0, 0.5) stays; (0, -2, 0) -> (0, -1, 0)
    # their plain mean: (0.2, -0.2 / 3, 0.5 / 3)
    np.testing.assert_allclose(result["w"], [1.2, 1.0 - 0.2 / 3], rtol=1e-6)
    np.testing.assert_allclose(result["b"], [0.5 / 3], rtol=1e-6)
    assert result["w"].dtype == np.float32
    assert result["count"].dtype == np.int64 and result["count"].tolist() == [4]
    assert set(vars(aggregator)) == attributes
    if wrapper == ADAPTIVE:
        # two of three clipped, one of three not: b = 1/3 below the target 1 - q = 0.5, so C
        # grows: C <- C exp(-lr (1/3 - 1/2)), lr = 0.2 (the defaults)
        assert aggregator.clipping_norm == pytest.approx(math.exp(0.2 / 6), rel=1e-12)
    aggregator = make_aggregator(wrapper, params, devices)[0]
    reference, models, weights = hand_round()
    noise_before = dp_round_noise(aggregator, len(models))
    result, _ = aggregate_uploads(aggregator, 4, models, weights, reference, seed=11)
    assert result is not None
    draw = np.random.RandomState(noise_seed(11, 4))  # the legacy generator Flower draws from
    if wrapper == ADAPTIVE:
        unclipped = 1.0 - draw.normal(2.0, 2.0) / 3  # the noisy count of the two clipped
        next_norm = math.exp(-(unclipped - 0.5))
        assert aggregator.clipping_norm == pytest.approx(next_norm, rel=1e-12)
        assert abs(next_norm - 1.0) > 0.05  # the two norms differ enough to tell apart
    mean = {"w": np.array([1.2, 1.0 - 0.2 / 3]), "b": np.array([0.5 / 3])}
    for key in ("w", "b"):
        noise = draw.normal(0.0, z_updates / 3, mean[key].shape).astype(np.float32)
        np.testing.assert_allclose(result[key], mean[key] + noise, rtol=1e-5, atol=1e-6)
    # the round's record: the norm it clipped with (C_0 = 1), and Flower's std z' C_0 / n
    assert noise_before == pytest.approx((1.0, z_updates / 3), rel=1e-12)
    assert dp_round_noise(make_aggregator("FedAvg", {}, 40)[0], 3) is None


@pytest.mark.parametrize(
    ("quantile", "low", "high"), [(0.2, 8.0, 9.0), (0.5, 5.0, 6.0), (0.7, 3.0, 4.0)]
)
def test_target_clipped_quantile_is_the_fraction_of_updates_clipped(quantile, low, high):
    """Ten updates of norms 1, 2, ..., 10 every round: with q = 0.2 two are clipped (norms 9
    and 10) once C is in [8, 9); with q = 0.5 five, C in [5, 6); with q = 0.7, seven (norms
    4 .. 10) once C is in [3, 4). (Andrew et al.'s gamma = 0.2 unclipped would settle C in
    [2, 3) instead.) Flower 1.42's wrapper as shipped moves C the wrong way: from C = 4.5 (six
    of ten clipped) it collapses for q < 0.6 and grows without bound for q > 0.6."""
    params = {"noise-multiplier": 0.0, "initial-clipping-norm": 4.5, "clipped-count-stddev": 0.0}
    aggregator = make_aggregator(ADAPTIVE, {**params, "target-clipped-quantile": quantile}, 10)[0]
    shipped = DifferentialPrivacyServerSideAdaptiveClipping(
        flower_strategies.FedAvg(), 0.0, 10, 4.5, quantile, clipped_count_stddev=0.0
    )
    reference = {"w": np.zeros(1, np.float32)}
    models = [{"w": np.array([float(n)], np.float32)} for n in range(1, 11)]
    seen, flowers = [], []
    for rnd in range(1, 61):
        aggregate_uploads(aggregator, rnd, models, [1] * 10, reference)
        aggregate_uploads(shipped, rnd, models, [1] * 10, reference)
        seen.append(aggregator.clipping_norm)
        flowers.append(shipped.clipping_norm)
    # from 4.5 it moves by at most exp(0.2 |b - gamma|) <= exp(0.2) a round into its band (in
    # under 20 rounds), then stays (exactly at the target it does not move)
    settled = seen[30:]
    assert low / math.exp(0.2) <= min(settled) and max(settled) <= high * math.exp(0.2)
    assert low <= float(np.median(settled)) <= high
    assert flowers[-1] < 1.0 if quantile < 0.6 else flowers[-1] > 20.0


def dp_run(tmp_path: Path, name: str, *, cohorts: bool = True, **changes: Any) -> dict:
    values = {"num-devices": 8, "num-server-rounds": 3, "data-dir": str(tmp_path / "data")}
    values |= {"aggregator": FIXED, "aggregator-params.noise-multiplier": 0.3}
    values |= {"aggregator-params.clipping-norm": CLIP, **changes}
    values |= {"result-dir": str(tmp_path / name)}
    run_inprocess(validated_run_config(values), cohorts=cohorts)
    return torch.load(tmp_path / name / MODEL_FILE)


def test_a_private_run_records_its_noise_and_repeats_under_cohorts_and_alone(tmp_path):
    first = dp_run(tmp_path, "first", seed=3)
    written = lines(tmp_path / "first")
    private = [line for line in written if not line["model_kept"]]
    assert len(private) >= 2
    for line in private:  # Flower's std z C / n, n the round's uploads
        assert line["dp_clipping_norm"] == CLIP
        assert line["dp_noise_std"] == pytest.approx(0.3 * CLIP / line["num_uploaded"], rel=1e-12)
    for line in written:
        if line["model_kept"]:  # nothing was aggregated, no noise added
            assert line["dp_clipping_norm"] is None and line["dp_noise_std"] is None
    second = dp_run(tmp_path, "second", seed=3)
    assert all(torch.equal(first[k], second[k]) for k in first)
    # Cohorts and per-device calls differ by rounding: compared in float64, within the
    # tolerance of test_cohort_execution (float32 has none that holds on every machine).
    float64 = {"model": "layer_cases:mlp_float64"}
    together = dp_run(tmp_path, "together", seed=3, **float64)
    alone = dp_run(tmp_path, "alone", seed=3, cohorts=False, **float64)  # one device at a time
    for key in together:
        assert together[key].dtype == torch.float64
        torch.testing.assert_close(alone[key], together[key], rtol=100 * REL64, atol=0.0)


def test_readme_dp_measurement_command_runs(tmp_path):
    words = run_readme_attack_sweep(
        ".venv/bin/python tests/attack_sweep.py --policies fedcgd-fscd", tmp_path, "--rounds", "1"
    )
    with (tmp_path / "runs.csv").open() as handle:
        runs = list(csv.DictReader(handle))
    named = words[words.index("--aggregators") + 1].split(",")
    assert [r["aggregator"] for r in runs] == named and len(named) == 6
    for run_row in runs[1:]:  # each DP label ran Flower's wrapper with its own parameters
        config = json.loads((tmp_path / run_row["result_dir"] / "config.json").read_text())
        assert config["aggregator"].startswith("DifferentialPrivacyServerSide")
        assert config["aggregator_params"]["noise-multiplier"] == float(
            run_row["aggregator"].split("-z")[1]
        )
