"""The summary of a collection run (kgen.search.collection): outcomes, fast_p, geometric-mean speedup and
claimed-vs-measured speedups, computed from plain records so every figure can be checked by hand,
and rendered as a terminal table, JSON, CSV or Markdown.

fast_p is KernelBench's (`src/kernelbench/score.py` `fastp`, as `scripts/benchmark_eval_analysis.py`
calls it): over the collection's problems, the fraction whose sample 0 is correct *and* strictly
more than p times faster than the baseline; the denominator is every problem in the collection,
whatever happened to its entries, and a problem without a sample 0 counts as not correct. Other
samples of a problem count nowhere in fast_p (they do in the outcomes and claims). Entries without a
sample id (JSONL rows, pairs of files) are numbered per problem in the order they appear, so the
first entry of each problem is its sample 0. The geometric mean is KernelBench's
`geometric_mean_speed_ratio_correct_only` over the same counted samples. Two differences, both
stricter than KernelBench: `correct` is kgen's verdict (`suspicious` results do not count), and the
times are medians with L2 flushed (KernelBench uses means). kgen's baselines are eager and
torch.compile timed on the evaluating GPU, so there is one fast_p row for each.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Optional

from kgen.core.records import CPU_CORRECT

FAST_P = (0.0, 1.0, 1.5, 2.0)
BAD_ROW = "bad_row"  # an entry that could not be evaluated at all: no reference, an unreadable file ...
PENDING = "pending"  # not evaluated yet (an interrupted run)
# A claim holds when the measured speedup is at least this share of it: claims were often measured on
# other GPUs and with other timers, so a 10% shortfall is not called a false claim.
CLAIM_SLACK = 0.9
BASELINES = ("eager", "torch.compile")


@dataclass
class EntryResult:
    """One entry of a collection with its (latest) evaluation."""

    label: str  # how the collection names it: a file, or a JSONL line
    problem: Optional[str]  # the reference's name; None where it could not be resolved
    problem_hash: Optional[str]  # groups entries by problem for fast_p
    sample: int
    outcome: str  # an evaluation outcome, BAD_ROW or PENDING
    message: str = ""
    language: Optional[str] = None
    runtime_ms: Optional[float] = None
    speedup_eager: Optional[float] = None
    speedup_compile: Optional[float] = None
    claimed_eager: Optional[float] = None
    claimed_compile: Optional[float] = None
    candidate_id: Optional[int] = None

    def speedup(self, baseline: str) -> Optional[float]:
        return self.speedup_eager if baseline == "eager" else self.speedup_compile

    def claimed(self, baseline: str) -> Optional[float]:
        return self.claimed_eager if baseline == "eager" else self.claimed_compile


@dataclass
class Claim:
    """A claimed speedup against one baseline, and what kgen measured."""

    label: str
    baseline: str
    claimed: float
    measured: Optional[float]
    outcome: str
    verdict: str  # "does not hold" | "holds" | "untimed"


@dataclass
class CollectionSummary:
    entries: int
    problems: int
    outcomes: dict[str, int]
    static_reject_reasons: dict[str, int]
    bad_rows: list[tuple[str, str]]
    fast_p: dict[str, dict[str, Optional[float]]]  # baseline -> "p" -> fraction (None: nothing timed)
    geomean_speedup: dict[str, Optional[float]]  # baseline -> geometric mean over the counted correct samples
    counted_correct: int  # problems whose counted sample is correct
    claims: list[Claim] = field(default_factory=list)
    timed: bool = True

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bad_rows"] = [{"entry": label, "reason": reason} for label, reason in self.bad_rows]
        d["fast_p_definition"] = ("KernelBench's fastp: problems whose sample 0 is correct and more than p times "
                                  "faster than the baseline, over all problems of the collection")
        return d


def reject_reason(message: str) -> str:
    """A static rejection's reason without what is particular to one candidate (line numbers, names), so
    reasons group: 'syntax error on line 3: ...' and '... on line 9: ...' are one reason."""
    text = (message or "").strip().splitlines()[0] if (message or "").strip() else "no reason given"
    text = re.sub(r"kernel\(s\) .*? but", "kernel(s) ... but", text)
    text = re.split(r":\s| \(", text, maxsplit=1)[0]
    return re.sub(r"\b\d+\b", "N", text).strip()


def counted_samples(results: list[EntryResult]) -> dict[str, Optional[EntryResult]]:
    """Per problem (its hash), the entry fast_p counts, as KernelBench does: sample 0, or None where the
    problem has no sample 0 (it then counts as not correct)."""
    counted: dict[str, Optional[EntryResult]] = {}
    for r in results:
        if r.problem_hash is None:
            continue
        if r.sample == 0 or r.problem_hash not in counted:
            counted[r.problem_hash] = r if r.sample == 0 else counted.get(r.problem_hash)
    return counted


def fast_p(counted: list[Optional[EntryResult]], baseline: str, p: float) -> Optional[float]:
    """KernelBench's fastp over `counted` (one entry per problem): correct and speedup > p, over all."""
    if not counted:
        return None
    hits = sum(1 for r in counted if r is not None and r.outcome == "correct"
               and (p == 0 or (r.speedup(baseline) is not None and r.speedup(baseline) > p)))
    return hits / len(counted)


def geomean(values: list[float]) -> Optional[float]:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def claim_verdict(r: EntryResult, baseline: str) -> Optional[Claim]:
    claimed = r.claimed(baseline)
    if claimed is None:
        return None
    measured = r.speedup(baseline) if r.outcome == "correct" else None
    if r.outcome in (PENDING, "not_run") or (r.outcome == "correct" and measured is None):
        verdict = "untimed"
    elif measured is not None and measured >= CLAIM_SLACK * claimed:
        verdict = "holds"
    else:
        verdict = "does not hold"
    return Claim(r.label, baseline, claimed, measured, r.outcome, verdict)


def _claim_order(c: Claim) -> tuple:
    rank = {"does not hold": 0, "untimed": 1, "holds": 2}[c.verdict]
    ratio = (c.measured / c.claimed) if c.measured is not None and c.claimed else -1.0
    return rank, ratio, c.label


def summarize(results: list[EntryResult], timed: bool = True) -> CollectionSummary:
    counted = counted_samples(results)
    counted_list = list(counted.values())
    static = Counter(reject_reason(r.message) for r in results if r.outcome == "static_reject")
    fast = {b: {f"{p:g}": (fast_p(counted_list, b, p) if timed or p == 0 else None) for p in FAST_P}
            for b in BASELINES}
    means = {}
    for b in BASELINES:
        speeds = [r.speedup(b) for r in counted_list if r is not None and r.outcome == "correct"]
        means[b] = geomean([s for s in speeds if s]) if timed and speeds and all(speeds) else None
    claims = [c for r in results for b in BASELINES if (c := claim_verdict(r, b)) is not None]
    return CollectionSummary(
        entries=len(results), problems=len(counted), outcomes=dict(Counter(r.outcome for r in results).most_common()),
        static_reject_reasons=dict(static.most_common()),
        bad_rows=[(r.label, r.message) for r in results if r.outcome == BAD_ROW],
        fast_p=fast, geomean_speedup=means,
        counted_correct=sum(1 for r in counted_list if r is not None and r.outcome == "correct"),
        claims=sorted(claims, key=_claim_order), timed=timed)


# ---- rendering ----

def _num(value: Optional[float], digits: int = 3, suffix: str = "") -> str:
    return "-" if value is None else f"{value:.{digits}g}{suffix}"


def _pct(value: Optional[float]) -> str:
    return "-" if value is None else f"{value * 100:.1f}%"


def _sections(s: CollectionSummary) -> list[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) of each table the summary shows."""
    # untimed means no GPU: a CPU `correct` checked the outputs but not who computed them (kgen.core.records)
    sections = [("Outcomes", ["outcome", "entries"],
                 [[o if s.timed or o != "correct" else CPU_CORRECT, str(n)] for o, n in s.outcomes.items()])]
    if s.static_reject_reasons:
        sections.append(("Static rejections by reason", ["reason", "entries"],
                         [[why, str(n)] for why, n in s.static_reject_reasons.items()]))
    if s.bad_rows:
        sections.append(("Bad rows (not evaluated)", ["entry", "reason"], [[a, b] for a, b in s.bad_rows]))
    rows = [[f"fast_{p}"] + [_pct(s.fast_p[b][p]) for b in BASELINES] for p in s.fast_p["eager"]]
    rows.append(["geomean speedup (correct)"] + [_num(s.geomean_speedup[b], suffix="x") for b in BASELINES])
    sections.append((f"fast_p over {s.problems} problem(s), sample 0 of each ({s.counted_correct} correct)"
                     + ("" if s.timed else "; no GPU: nothing timed, fast_0 is the correct share"),
                     ["metric", "vs eager", "vs torch.compile"], rows))
    if s.claims:
        sections.append(("Claimed vs measured (claims that do not hold first)",
                         ["entry", "baseline", "claimed", "measured", "outcome", "verdict"],
                         [[c.label, c.baseline, _num(c.claimed, suffix="x"), _num(c.measured, suffix="x"), c.outcome,
                           c.verdict] for c in s.claims]))
    return sections


def _aligned(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]

    def line(cells: list[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()
    return [line(header), line(["-" * w for w in widths])] + [line(r) for r in rows]


def render(s: CollectionSummary, results: list[EntryResult], form: str = "table") -> str:
    """The summary as `form`: table (aligned text), markdown, json (the summary and every entry) or csv
    (one line per entry, with its outcome, speedups and claims)."""
    if form == "json":
        return json.dumps({"summary": s.to_dict(), "entries": [asdict(r) for r in results]}, indent=2)
    if form == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["entry", "problem", "sample", "outcome", "reason", "runtime_ms", "speedup_eager",
                         "speedup_compile", "claimed_eager", "claimed_compile", "candidate_id"])
        for r in results:
            writer.writerow([r.label, r.problem or "", r.sample, r.outcome,
                             reject_reason(r.message) if r.outcome == "static_reject" else (r.message or "")[:200],
                             *("" if v is None else v for v in (r.runtime_ms, r.speedup_eager, r.speedup_compile,
                                                                 r.claimed_eager, r.claimed_compile, r.candidate_id))])
        return out.getvalue()
    lines: list[str] = [f"{s.entries} entries, {s.problems} problem(s)"]
    for title, header, rows in _sections(s):
        lines.append("")
        if form == "markdown":
            lines += [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
        else:
            lines += [title] + ["  " + x for x in _aligned(header, rows)]
    return "\n".join(lines) + "\n"
