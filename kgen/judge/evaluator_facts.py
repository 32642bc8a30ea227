"""The machine that evaluates the candidates, as a prompt states it (issue 32): the torch, Triton and CUDA
versions every evaluation records, the GPU's properties and its measured ceilings.

They are taken where the candidates are evaluated (by an evaluator on its Ray node, or by the search itself
when its local cluster evaluates on its own GPU), once per search, and stored with the run
(runs.settings["evaluator"]); every prompt of the run reads them from there (kgen.store.history). Never
from the process that renders the prompt: a Ray head without a GPU, or a laptop re-rendering an H100 run,
would otherwise tell the model about itself.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Optional

from kgen.core.errors import KgenError
from kgen.problems.roofline import Ceilings

VERSION_KEYS = ("torch_version", "triton_version", "cuda_version")


@dataclass(frozen=True)
class EvaluatorFacts:
    """What the prompt states about the evaluating machine. A GPU comes with its properties and its measured
    ceilings (the prompt's roofline needs them); a CPU (Triton's interpreter) with neither."""

    device: str  # as evaluations record it: the GPU's name, or "cpu"
    versions: dict[str, Optional[str]]  # VERSION_KEYS, as kgen.judge.evaluate._versions records them
    device_properties: Optional[dict[str, Any]] = None
    ceilings: Optional[Ceilings] = None

    def __post_init__(self):
        if set(self.versions) != set(VERSION_KEYS) or not self.versions.get("torch_version"):
            raise KgenError(f"evaluator facts need the versions {', '.join(VERSION_KEYS)} (got {self.versions})")
        if self.gpu and (self.device_properties is None or self.ceilings is None):
            raise KgenError(f"evaluator facts of the GPU {self.device} need its properties and measured ceilings")

    @property
    def gpu(self) -> bool:
        return self.device != "cpu"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> EvaluatorFacts:
        """The facts as to_json wrote them, or a one-line KgenError saying what is wrong with them."""
        try:
            ceilings = data.get("ceilings")
            return cls(device=str(data["device"]), versions=dict(data["versions"]),
                       device_properties=data.get("device_properties"),
                       ceilings=Ceilings(**ceilings) if ceilings is not None else None)
        except (AttributeError, KeyError, TypeError, ValueError) as e:
            raise KgenError(f"malformed evaluator facts ({type(e).__name__}: {e})") from e


def device_properties(index: int = 0) -> Optional[dict[str, Any]]:
    """This process's GPU's properties a kernel writer tunes for; None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    p = torch.cuda.get_device_properties(index)
    smem = getattr(p, "shared_memory_per_block_optin", 0) or getattr(p, "shared_memory_per_block", 0)
    return {"name": p.name, "compute_capability": f"{p.major}.{p.minor}", "sm_count": p.multi_processor_count,
            "shared_memory_per_block_kib": smem // 1024,
            "shared_memory_per_sm_kib": getattr(p, "shared_memory_per_multiprocessor", 0) // 1024,
            "registers_per_sm": getattr(p, "regs_per_multiprocessor", None),
            "l2_cache_mib": round(getattr(p, "L2_cache_size", 0) / 2**20, 1),
            "memory_gib": round(p.total_memory / 2**30)}


def this_machine() -> EvaluatorFacts:
    """The facts of the machine this process runs on, as an evaluator here judges candidates: its first GPU
    (the ceilings from the cache, else measured now: ~10 s, once per GPU and torch) or, without one, the CPU."""
    import torch

    from kgen.judge.evaluate import _versions
    from kgen.problems.roofline import device_ceilings

    if not torch.cuda.is_available():
        return EvaluatorFacts(device="cpu", versions=_versions())
    return EvaluatorFacts(device=torch.cuda.get_device_name(0), versions=_versions(),
                          device_properties=device_properties(), ceilings=device_ceilings())
