"""The built-in policies, FedCGD (paper Algorithm 3) and the paper's baselines (BC, BN2, POC,
Fed-CBS, all feasible devices; docs/design.md, "Best effort"), and how the run config's
``policy`` and ``policy-params`` name a policy object (docs/design.md, "Your own policy").
No flwr, no torch.
"""  # noqa: D205

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import numpy as np
from numpy.typing import NDArray

from fedcgd_config.imports import REFERENCE_FORMS, import_object, is_reference
from fedcgd_config.schema import DEFAULTS
from fedcgd_config.setting import did_you_mean
from fedcgd_strategy.constructor_params import constructor_arguments, keyword_parameters
from fedcgd_strategy.estimators import (
    device_gradient_estimates,
    estimate_class_gradient,
    estimate_per_class_gradient,
)
from fedcgd_strategy.policies.core import (
    Decision,
    Policy,
    RoundInputs,
    UploadedUpdates,
    decision_from_mask,
)
from fedcgd_strategy.problem import SchedulingProblem, as_nonnegative_array
from fedcgd_strategy.selectors import FedCBSState, best_score_first, fedcbs_select, power_of_choice
from fedcgd_strategy.solvers import solve


@dataclass
class FedCGDPolicy(Policy):
    """FedCGD (paper Algorithm 3): P1 with this round's σ̂ (eq. global_est_sigma) and Ĝ (eq.
    G_est) or, ``per_class``, Ĝ_c float[C] (eq. Gc_est) of the last uploads; ``initial_g`` before
    them. ``method``: P1's solver; ``exact_time_limit_s`` caps each MILP (s, 0: no cap).
    """  # noqa: D205

    method: str = "fscd"
    per_class: bool = False
    initial_g: float = 1.0
    num_classes: int = 10
    exact_time_limit_s: float = 0.0
    _g: NDArray[np.float64] = field(init=False, repr=False)
    needs_sigma: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._g = np.full(self.num_classes if self.per_class else 1, float(self.initial_g))

    @property
    def class_gradient(self) -> NDArray[np.float64]:
        """Ĝ (float[1]) or Ĝ_c (float[C]) the next round will use."""
        return self._g.copy()

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Solve P1 over the candidates (paper Algorithm 3, "Call Alg. 1 or Alg. 2")."""
        idx = np.flatnonzero(inputs.candidate)
        selected = np.zeros(inputs.num_devices, dtype=bool)
        if idx.size == 0:
            return decision_from_mask(inputs, selected, self._g)
        problem = SchedulingProblem(
            label_dist=inputs.label_dist[idx],
            target_dist=inputs.target_dist,
            min_bandwidth_hz=inputs.min_bandwidth_hz[idx],
            total_bandwidth_hz=inputs.total_bandwidth_hz,
            sigma=inputs.global_sigma(),
            class_gradient=self._g if self.per_class else float(self._g[0]),
            batch_size=inputs.batch_size,
        )
        time_limit_s = self.exact_time_limit_s or None
        result = solve(problem, self.method, rng=rng, milp_time_limit_s=time_limit_s)
        selected[idx[result.selected]] = True
        return decision_from_mask(inputs, selected, self._g, result)

    def observe_uploads(self, uploads: UploadedUpdates) -> None:
        """Update Ĝ (eq. G_est) or Ĝ_c (eq. Gc_est); kept with fewer than two uploads."""
        if uploads.updates.shape[0] < 2:
            return
        u = uploads
        grads = device_gradient_estimates(u.updates, u.learning_rate, u.local_steps)
        seen = (grads, u.weights, u.label_dist, u.target_dist)
        if self.per_class:
            self._g = np.asarray(estimate_per_class_gradient(*seen, self._g), dtype=np.float64)
        else:
            self._g = np.array([estimate_class_gradient(*seen, float(self._g[0]))], np.float64)

    def state_dict(self) -> dict[str, object]:
        """Ĝ (or Ĝ_c) after the last update."""
        return {"class-gradient": [float(v) for v in self._g]}

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore Ĝ (Ĝ_c) from :meth:`state_dict` output (finite, >= 0, of this rule's shape)."""
        g = state["class-gradient"]
        self._g = as_nonnegative_array(g, "class-gradient", shape=self._g.shape)


def _candidate_bandwidth(inputs: RoundInputs) -> NDArray[np.float64]:
    """B* with non-candidates made infeasible, so selectors never take them."""
    return np.where(inputs.candidate, inputs.min_bandwidth_hz, np.inf)


@dataclass
class RankingPolicy(Policy):
    """Ranks the candidates by the :class:`RoundInputs` field :attr:`score`, highest first, and
    packs them best effort."""  # noqa: D205, D209

    pack_rule: str = "stop"
    score: ClassVar[str]

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by :attr:`score` (:func:`~fedcgd_strategy.selectors.best_score_first`)."""
        mask = best_score_first(
            inputs.candidate, getattr(inputs, self.score), _candidate_bandwidth(inputs),
            inputs.total_bandwidth_hz, rule=self.pack_rule,
        )  # fmt: skip
        return decision_from_mask(inputs, mask)


@dataclass
class BestChannelPolicy(RankingPolicy):
    """BC (Amiri et al.): by channel gain, descending, best effort (docs/design.md)."""

    score: ClassVar[str] = "gain_lin"
    needs_reports: ClassVar[bool] = False


@dataclass
class BestNormPolicy(RankingPolicy):
    """BN2 (Amiri et al.): by the L2 norm of the local update (after training), best effort."""

    score: ClassVar[str] = "update_norm"
    needs_post_training: ClassVar[bool] = True


@dataclass
class PowerOfChoicePolicy(Policy):
    """POC (Cho et al.): V' candidates drawn uniformly, by accumulated loss, best effort."""

    poc_candidates: int = 0
    pack_rule: str = "stop"
    needs_post_training: ClassVar[bool] = True

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule by this round's training loss (needs post-training reports)."""
        if inputs.train_loss is None:
            raise ValueError(f"policy {self.name!r} needs training losses (protocol train-all)")
        mask = power_of_choice(
            inputs.candidate, inputs.train_loss, _candidate_bandwidth(inputs),
            inputs.total_bandwidth_hz, self.poc_candidates, rng, rule=self.pack_rule,
        )  # fmt: skip
        return decision_from_mask(inputs, mask)


@dataclass
class FedCBSPolicy(Policy):
    """Fed-CBS (Zhang et al. 2023): QCID-driven CUCB sampling until the next device does not fit,
    QCID from the local class distributions reported at discovery (no query phase)."""  # noqa: D205, D209

    num_devices: int = 1
    fedcbs_lambda: float = 10.0
    state: FedCBSState = field(init=False)
    needs_reports: ClassVar[bool] = False

    def __post_init__(self) -> None:
        self.state = FedCBSState(self.num_devices)

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Sample sequentially; selection counts persist across rounds in :attr:`state`."""
        if inputs.local_dist is None:
            raise ValueError(f"policy {self.name!r} needs the devices' local class distributions")
        mask = fedcbs_select(
            self.state, inputs.candidate, inputs.local_dist, inputs.num_examples,
            _candidate_bandwidth(inputs), inputs.total_bandwidth_hz, rng, lam=self.fedcbs_lambda,
        )  # fmt: skip
        return decision_from_mask(inputs, mask)

    def state_dict(self) -> dict[str, object]:
        """Selection counts and round counter."""
        return dict(self.state.to_dict())

    def load_state_dict(self, state: Mapping[str, object]) -> None:
        """Restore the selection counts and round counter (of this rule's V devices)."""
        restored = FedCBSState.from_dict(state)
        if restored.num_devices != self.num_devices:
            raise ValueError(
                f"Fed-CBS counts of {restored.num_devices} devices; this run has {self.num_devices}"
            )
        self.state = restored


@dataclass
class AllFeasiblePolicy(Policy):
    """Every available device that can meet the deadline (FedAvg reference; no bandwidth budget)."""

    needs_reports: ClassVar[bool] = False
    uses_budget: ClassVar[bool] = False  # the reference without a budget (still checked else)

    def schedule(self, inputs: RoundInputs, rng: np.random.Generator) -> Decision:
        """Schedule every candidate with finite B*."""
        return decision_from_mask(inputs, inputs.candidate & np.isfinite(inputs.min_bandwidth_hz))


#: Run-config key of the policy.
POLICY_KEY = "policy"
#: Run-config table of the policy's own parameters.
PARAMS_KEY = "policy-params"


@dataclass(frozen=True)
class PolicyContext:
    """What a policy constructor may receive by parameter name besides ``policy-params``: V, C
    (from the data set) and the run-config keys of the same names in kebab case."""  # noqa: D205, D209

    num_devices: int
    num_classes: int
    initial_g: float = cast(float, DEFAULTS["initial-g"])
    pack_rule: str = cast(str, DEFAULTS["pack-rule"])
    poc_candidates: int = cast(int, DEFAULTS["poc-candidates"])
    fedcbs_lambda: float = cast(float, DEFAULTS["fedcbs-lambda"])
    exact_time_limit_s: float = cast(float, DEFAULTS["exact-time-limit-s"])


#: PolicyContext field -> where its value comes from (for error messages).
CONTEXT_SOURCES: dict[str, str] = {
    f.name: f"run-config key {f.name.replace('_', '-')!r}"
    for f in dataclasses.fields(PolicyContext)
} | {"num_classes": "the data set"}


def _fedcgd(method: str, per_class: bool = False) -> tuple[type[Policy], Mapping[str, object]]:
    return FedCGDPolicy, {"method": method, "per_class": per_class}


#: A built-in policy: its label (every figure, table and console line shows it), its class and
#: the constructor arguments its name fixes.
_BUILT_IN: dict[str, tuple[str, tuple[type[Policy], Mapping[str, object]]]] = {
    "fedcgd-fscd": ("FedCGD-FSCD", _fedcgd("fscd")),
    "fedcgd-gs": ("FedCGD-GS", _fedcgd("gs")),
    "fedcgd-fscd-gc": ("FedCGD-FSCD (Ĝ_c)", _fedcgd("fscd", per_class=True)),
    "fedcgd-exact": ("FedCGD-exact", _fedcgd("exact")),
    "fedcgd-cd": ("FedCGD-CD", _fedcgd("cd")),
    "bc": ("BC (best channel)", (BestChannelPolicy, {})),
    "bn2": ("BN2 (best norm)", (BestNormPolicy, {})),
    "poc": ("POC (power of choice)", (PowerOfChoicePolicy, {})),
    "fedcbs": ("Fed-CBS", (FedCBSPolicy, {})),
    "all": ("all (no budget)", (AllFeasiblePolicy, {})),
}
#: The built-in policy names (the run-config key ``policy`` also takes references).
POLICY_NAMES: tuple[str, ...] = tuple(_BUILT_IN)
#: Each built-in policy's label.
POLICY_LABELS: dict[str, str] = {name: label for name, (label, _) in _BUILT_IN.items()}
#: What a misspelt name is compared with: the names, then the labels.
_SPELLINGS = (*POLICY_NAMES, *POLICY_LABELS.values())
#: A built-in's name or label in lower case -> its name.
_BY_LOWER = {k.lower(): name for name, label in POLICY_LABELS.items() for k in (name, label)}


def canonical_policy(setting: str) -> str:
    """The built-in name ``setting`` spells as its name or label, any case (``BC (best
    channel)``: ``bc``); else ``setting``."""  # noqa: D205, D209
    return _BY_LOWER.get(setting.lower(), setting) if isinstance(setting, str) else setting


def policy_entry(setting: str) -> tuple[type[Policy], Mapping[str, object]]:
    """The class and fixed arguments ``policy = setting`` names (ValueError: one line)."""
    if not isinstance(setting, str):
        raise ValueError(f"run-config key {POLICY_KEY!r} must be a string; got {setting!r}")
    if canonical_policy(setting) in _BUILT_IN:
        return _BUILT_IN[canonical_policy(setting)][1]
    if not is_reference(setting):
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}; {did_you_mean(setting, _SPELLINGS)}"
            f"allowed: {', '.join(POLICY_NAMES)} (or their figure labels), or your Policy "
            f"subclass as {REFERENCE_FORMS}"
        )
    found = import_object(setting, POLICY_KEY)
    if not (isinstance(found, type) and issubclass(found, Policy)):
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r} names {found!r}; allowed: a subclass "
            "of fedcgd_strategy.Policy"
        )
    if inspect.isabstract(found):
        missing = ", ".join(sorted(getattr(found, "__abstractmethods__", ())))
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}: {found.__name__} does not implement "
            f"{missing}"
        )
    return found, {}


def policy_class(setting: str) -> type[Policy]:
    """The class of the policy ``setting`` names (its class attributes say what it needs)."""
    return policy_entry(setting)[0]


def policy_param_arguments(setting: str, params: Mapping[str, object]) -> dict[str, object]:
    """``policy-params`` checked against ``setting``'s constructor, as kwargs (ValueError)."""
    policy_type, fixed = policy_entry(setting)
    refused = {n: f"{n} comes from {source}; set it there" for n, source in CONTEXT_SOURCES.items()}
    for name, value in fixed.items():
        fixes = f"policy {setting!r} fixes {name} = {value!r}"
        refused[name] = f"{fixes}; name another policy to change it"
    return constructor_arguments(
        policy_type, params, table=PARAMS_KEY, owner=f"policy {setting!r}", refused=refused,
        untyped=True,
    )  # fmt: skip


def resolved_policy_arguments(
    setting: str, context: PolicyContext, params: Mapping[str, object] | None = None
) -> dict[str, dict[str, Any]]:
    """Every keyword argument the policy is built with: its value and where it came from."""
    policy_type, fixed = policy_entry(setting)
    given = policy_param_arguments(setting, params or {})
    resolved: dict[str, dict[str, Any]] = {}
    for name, parameter in keyword_parameters(policy_type).items():
        if name in fixed:
            resolved[name] = {"value": fixed[name], "from": f"the policy name {setting!r}"}
        elif name in given:
            resolved[name] = {"value": given[name], "from": f"run-config key {PARAMS_KEY!r}"}
        elif name in CONTEXT_SOURCES:
            resolved[name] = {"value": getattr(context, name), "from": CONTEXT_SOURCES[name]}
        elif parameter.default is not inspect.Parameter.empty:
            resolved[name] = {"value": parameter.default, "from": "the class default"}
    return resolved


def make_policy(
    setting: str, context: PolicyContext, params: Mapping[str, object] | None = None, *,
    resolved: Mapping[str, Mapping[str, Any]] | None = None,
) -> Policy:  # fmt: skip
    """Build the policy the run config names, ``name`` canonical (ValueError: one line);
    ``resolved``: its :func:`resolved_policy_arguments` where already computed."""  # noqa: D205, D209
    if resolved is None:
        resolved = resolved_policy_arguments(setting, context, params)
    arguments = {k: v["value"] for k, v in resolved.items() if v["from"] != "the class default"}
    try:
        policy = policy_class(setting)(**arguments)
    except (TypeError, ValueError) as err:
        raise ValueError(
            f"run-config key {POLICY_KEY!r} = {setting!r}: building it with "
            f"{arguments} raised {type(err).__name__}: {err}"
        ) from err
    policy.name = canonical_policy(setting)
    return policy


def replaced_defaults(setting: str, context: PolicyContext) -> list[str]:
    """Where a run-level setting replaces a researcher's class's own default, one line each."""
    if canonical_policy(setting) in _BUILT_IN:
        return []
    lines = []
    for name, parameter in keyword_parameters(policy_class(setting)).items():
        if name not in CONTEXT_SOURCES or parameter.default is inspect.Parameter.empty:
            continue
        value = getattr(context, name)
        if value != parameter.default:
            lines.append(
                f"policy {setting!r}: its default {name} = {parameter.default!r} is replaced by "
                f"{CONTEXT_SOURCES[name]} = {value!r}"
            )
    return lines
