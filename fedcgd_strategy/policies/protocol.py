"""The round protocols and the rule that picks one for a policy (from its class, not its name).

See docs/design.md, "One round": which messages a round sends depends on what the rule needs.
"""

from __future__ import annotations

from enum import StrEnum

from fedcgd_strategy.policies.base import Policy


class Protocol(StrEnum):
    """How a round is run (the values of the run-config key ``protocol``, docs/design.md)."""

    CHANNEL = "channel"
    QUERY = "query"
    TRAIN_ALL = "train-all"


#: Value of the run-config key ``protocol`` that derives it from the policy.
AUTO = "auto"
#: Values of the run-config key ``protocol``.
PROTOCOL_CHOICES: tuple[str, ...] = (AUTO, *(p.value for p in Protocol))


def allowed_protocols(policy_type: type[Policy]) -> tuple[Protocol, ...]:
    """The protocols that give ``policy_type`` what it needs, the least work first.

    Post-training rankers need ``TRAIN_ALL``; rules with ``needs_reports`` false can use any; the
    others need query or train-all.
    """
    if policy_type.needs_post_training:
        return (Protocol.TRAIN_ALL,)
    if policy_type.needs_reports:
        return (Protocol.QUERY, Protocol.TRAIN_ALL)
    return (Protocol.CHANNEL, Protocol.QUERY, Protocol.TRAIN_ALL)


def resolve_protocol(
    policy_type: type[Policy], requested: str = AUTO, policy_label: str | None = None
) -> Protocol:
    """Return the round protocol for a policy class (the one place this rule lives).

    ``"auto"`` picks the first of :func:`allowed_protocols`; ``policy_label`` names the policy in
    errors. Raises ValueError for an unknown protocol or one that does not give the rule what it
    needs.
    """
    if requested not in PROTOCOL_CHOICES:
        raise ValueError(f"protocol: got {requested!r}; allowed: {', '.join(PROTOCOL_CHOICES)}")
    allowed = allowed_protocols(policy_type)
    if requested == AUTO:
        return allowed[0]
    if requested not in allowed:
        raise ValueError(
            f"protocol {requested!r} does not work with policy "
            f"{policy_label or policy_type.__name__!r}; allowed: "
            f"{AUTO!r} or " + " or ".join(repr(p.value) for p in allowed)
        )
    return Protocol(requested)
