"""The judge's audits of who did the work, beyond the outputs being right: the candidate's Triton kernels with
their bodies removed must no longer give a correct output (the ablation, kgen.judge.ablation); every call
must launch a kernel of its own, with torch doing less than half the reference's work; and on a GPU most of
the device kernels' time must be the candidate's own, and its timed runs may not take much less GPU time
than the forward the judge watched (CUPTI) did.
"""

from __future__ import annotations

from typing import Optional

from kgen.core.records import Outcome
from kgen.judge import kernel_profile
from kgen.judge.spares import RunnerSlot
from kgen.judge.verdict import Trial, Verdict, _number, _Restart, _text

# timed median this far below the CUPTI-profiled forward's kernel time: suspicious. Honest kernels on the H100
# (65 evaluations of the 23 starters, benchmarks/judge_clock_gpu.sh) time at 0.984-1.04x their profiled kernels
WATCHED_SHARE, WATCHED_SLACK_MS = 0.9, 0.01
TORCH_WORK_LIMIT = 0.5  # torch may do less than half the reference's work, and use less than half the GPU time


class Audits:
    """The Judge's audits: a part of kgen.judge.judge.Judge, which mixes it in (it uses the Judge's state and
    its receive, make, write_inputs and check_outputs)."""

    def ablation(self, slot: RunnerSlot, trials: list[Trial], ablated: str) -> None:
        """The candidate with its Triton kernels' bodies removed, first in a fresh runner: if its output
        is still correct, its kernels are not what computes the result."""
        from kgen.judge.ablation import ablated_kernel_names

        slot.channel.send({"type": "load", "module": "ablated", "source": ablated})
        passed, torch_ops = False, set()
        budget_s = max(10.0, self.left_s() / 4)  # a hang here must leave time for the real evaluation
        try:
            self.receive(slot, "the ablated copy's import", ("loaded",), budget_s)
            for trial in trials[:2]:
                self.write_inputs(self.make(trial).inputs)
                slot.channel.send({"type": "forward", "module": "ablated", "stage": "the ablated copy's forward"})
                report = self.receive(slot, "the ablated copy's forward", ("output",), budget_s)
                passed = passed or all(c.ok for c in self.check_outputs(report, trial))
                if isinstance(report.get("work"), dict):
                    torch_ops.update(_text(k, 64) for k in list(report["work"])[:32])
        except Verdict as v:
            self.evidence.details["ablation"] = f"inconclusive: the ablated copy failed ({v.outcome})"
            if not slot.process.alive() or v.outcome == Outcome.TIMEOUT:
                raise _Restart() from None
            return
        if passed:
            self.evidence.details["torch_ops"] = sorted(torch_ops)
            who = f"torch ({', '.join(sorted(torch_ops))})" if torch_ops else "torch or other code"
            raise Verdict(Outcome.STATIC_REJECT, f"its output is still correct with the bodies of its own kernels "
                                                 f"({', '.join(ablated_kernel_names(self.source))}) removed: {who} "
                                                 "computes the result, not its kernels")
        self.evidence.details["ablation"] = "the ablated copy's output was wrong, as it must be"

    def audit_work(self, torch_work: list[dict[str, float]], launches: list[float]) -> None:
        """Every call launched a kernel of the candidate's own, and torch did less than half the
        reference's work in each (the runner's trace; the ablation and the GPU audit back it up)."""
        ops = sorted({op for w in torch_work for op in w})
        self.evidence.details["torch_ops"] = ops
        for t, count in enumerate(launches):
            if not count:
                call = "the repeat call" if t == len(launches) - 1 else f"call {t + 1}"
                raise Verdict(Outcome.STATIC_REJECT, f"{call} of forward launched none of the candidate's own kernels "
                                                     "(no Triton kernel defined in its file, no call into its CUDA "
                                                     "extension)")
        if self.reference_work:
            share = max(sum(w.values()) for w in torch_work) / self.reference_work
            self.evidence.details["torch_work_share"] = round(share, 4)
            if share >= TORCH_WORK_LIMIT:
                reference_ops = ", ".join(self.evidence.details["reference_ops"])
                raise Verdict(Outcome.STATIC_REJECT, f"torch operators ({', '.join(ops)}) did {share:.0%} of the "
                                                     f"reference's work ({reference_ops}); "
                                                     "its own kernels are not what computes the result")

    def audit_gpu_kernels(self, slot: RunnerSlot, runtime_ms: Optional[float] = None) -> None:
        """The device kernels one forward ran (CUPTI): most of the GPU time must be the candidate's own,
        and the timed runs may not take much less GPU time than this watched forward did (a candidate
        that notices the profiler and runs other code when unwatched)."""
        slot.channel.send({"type": "profile"})
        report = self.receive(slot, "the kernel audit", ("profile",))
        kernels = report.get("kernels")
        if not isinstance(kernels, list):
            self.evidence.details["gpu_kernels"] = f"not available: {_text(report.get('error'), 300)}"
            return
        own_names = set(self.evidence.details.get("kernels", [])) | _cuda_kernel_names(self.source)
        rows, own_us, other_us = [], 0.0, 0.0
        watched_ms = sum(_number(k.get("us")) for k in kernels[:50]) / 1e3
        for k in kernels[:50]:
            name, us = _text(k.get("name"), 300), _number(k.get("us"))
            whose = "own" if any(n and n in name for n in own_names) else (
                "copy" if any(w in name.lower() for w in ("memcpy", "memset", "fill")) else "other")
            own_us += us if whose == "own" else 0.0
            other_us += us if whose == "other" else 0.0
            rows.append({"name": name, "us": round(us, 2), "whose": whose})
        self.evidence.details["gpu_kernels"] = rows
        try:  # the profile the next round's prompt shows: advisory, so a malformed one is left out, not a verdict
            profile = kernel_profile.from_runner(report, own_names)
        except Exception:  # noqa: BLE001 - the runner's reply is the candidate's to shape
            profile = None
        if profile is not None:
            self.evidence.details["kernel_profile"] = profile
        if own_us + other_us > 0 and other_us / (own_us + other_us) >= TORCH_WORK_LIMIT:
            others = ", ".join(r["name"][:60] for r in rows if r["whose"] == "other")[:500]
            raise Verdict(Outcome.STATIC_REJECT, f"{other_us / (own_us + other_us):.0%} of its GPU kernel time was in "
                                                 f"kernels that are not its own ({others})")
        if runtime_ms is not None and runtime_ms < WATCHED_SHARE * watched_ms - WATCHED_SLACK_MS:
            raise Verdict(Outcome.SUSPICIOUS, f"its timed runs took {runtime_ms:.4g} ms, but the forward the judge "
                                              f"profiled ran {watched_ms:.4g} ms of GPU kernels (honest kernels "
                                              "time at "
                                              "0.98x or more of their profile): its timed runs leave work out of "
                                              "their events, or it does less work when it is not watched",
                                  runtime_ms=runtime_ms)


def _cuda_kernel_names(source: str) -> set[str]:
    """The names of the `__global__` functions in a CUDA source. Qualifiers with arguments
    (`__launch_bounds__(256)`, `__cluster_dims__(2, 1, 1)`, `__maxnreg__(64)`, `__attribute__((...))`)
    may stand before or after the return type: they are dropped first, else their parenthesis would be
    taken for the kernel's (a correct kernel's time then counted as another's, and the candidate
    rejected: seen on the H100 with the bundled cuda_two_pass and cuda_cluster_single_pass starters)."""
    import re

    bare = re.sub(r"__attribute__\s*\(\(.*?\)\)", " ", source, flags=re.S)
    bare = re.sub(r"\b__\w+__\s*\([^()]*\)", " ", bare)
    return set(re.findall(r"__global__\s+[\w:<>\s\*]*?\b(\w+)\s*\(", bare))
