"""How an evaluation ends, and what the judge gathers on the way: a Verdict (any outcome, raised from deep
inside the judge to end it), a HarnessFault (the judge or the sandbox failed, not the candidate: the outcome is
harness_error), the trials a candidate is verified on, and the evidence kept for the result's details.
Whatever a runner sends is read through `_text` and `_number`: data about the candidate, never trusted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

if TYPE_CHECKING:  # annotations only: kgen.judge.spares starts sandboxes before torch is imported (kgen eval)
    import torch

    from kgen.judge import verify

MESSAGE_CHARS = 4000


class Verdict(Exception):
    """A finished evaluation (any outcome), raised from deep inside to end it."""

    def __init__(self, outcome: str, message: str, **fields: Any):
        super().__init__(message)
        self.outcome = str(outcome)
        self.message = message
        self.fields = fields


class HarnessFault(Exception):
    """The judge or the sandbox failed, not the candidate: the outcome is harness_error."""


class _Restart(Exception):
    """The runner died during the ablation run; the real evaluation needs a fresh one."""


@dataclass
class Trial:
    """One verification call's inputs, drawn from `seed` (×`scale` for floating inputs), their float64
    references and torch's own error in the problem's dtype (kgen.judge.verify.OwnError): made when first
    needed and dropped when the next trial's are made, so the judge holds one trial's tensors at a
    time, however many trials there are."""

    seed: int
    scale: float
    _made: Optional[tuple[list[Any], list[torch.Tensor], list[Optional[verify.OwnError]]]] = \
        field(default=None, repr=False)

    @property
    def inputs(self) -> list[Any]:
        return self._made[0]

    @property
    def references(self) -> list[torch.Tensor]:
        return self._made[1]

    @property
    def own_errors(self) -> list[Optional[verify.OwnError]]:
        return self._made[2]


@dataclass
class Evidence:
    """What the judge learned on the way, for the result's details."""

    details: dict[str, Any] = field(default_factory=dict)
    worst: dict[str, float] = field(default_factory=dict)
    atol: Optional[float] = None


def _text(value: Any, limit: int = MESSAGE_CHARS) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _number(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def seconds_in(message: dict[str, Any], key: str, most: int, digits: int = 3) -> dict[str, float]:
    """The named seconds a sandboxed process's message carries under `key` (its start's, `ready`'s "seconds"; its
    setup's, `sealed`'s "setup_s", step by step): data from a process that ran no candidate code yet, still read as
    data, at most `most` of them."""
    steps = message.get(key)
    if not isinstance(steps, dict):
        return {}
    return {_text(k, 20): round(_number(v), digits) for k, v in list(steps.items())[:most]}
