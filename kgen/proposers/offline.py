"""The `offline` proposer: no network, no LLM. It proposes the problem's starter kernels first, then
retunes the best candidates so far: each child rewrites one to three tunable parameters of a parent.

Starters come from `--starters DIR`, else from `starters/<problem>/` beside the problem's file; a
starter is a candidate source (a Python file defining ModelNew that does the work in its own kernel).

Tunables, found in a candidate's source:
  - module-level int constants (`BLOCK_SIZE = 1024`), and `#define NAME <int>` / `constexpr int
    NAME = <int>;` inside string literals (CUDA sources); one name's sites change together;
  - `num_warps=<int>` / `num_stages=<int>` literals in calls (Triton launches).
A source that declares `KGEN_TUNABLE = {"NAME": [values...]}` is taken at its word: only those names
change, only to those values. Otherwise names are recognized by pattern and doubled or halved,
staying powers of two within bounds (warps 1..32, stages 1..6, threads 32..1024, items/unroll/vector
1..16, blocks and tiles 16..65536); names of the problem's own size constants never change.

It never proposes a source whose normalized hash was tried (the DB's, or earlier in the batch), is
deterministic for a seed (each round draws from seed and round), and when it runs out of unseen
retunings it proposes fewer, and logs so. Nor does it propose a retuning that is at least as large as
one that already failed for lack of on-chip resources ("out of resource: shared memory"): same kernel,
the same values for every other tunable, and every tile/block/stage tunable as large or larger (those
only ever grow shared memory and registers).
"""

from __future__ import annotations

import ast
import io
import logging
import random
import re
import tokenize
from dataclasses import dataclass, field
from itertools import combinations, product
from pathlib import Path
from typing import Optional

from kgen.core import pyast
from kgen.core.errors import KgenError
from kgen.core.records import Proposal
from kgen.core.resources import problems_dir
from kgen.judge.static_checks import detect_language
from kgen.problems.problem import Problem
from kgen.store.history import History, kernel_shape
from kgen.store.queries import normalized_source_hash

log = logging.getLogger("kgen.proposers.offline")

# (pattern, lowest, highest), first match wins; values stay powers of two.
TUNABLE_PATTERNS: tuple[tuple[str, int, int], ...] = (
    (r"(NUM_)?WARPS|\w+_WARPS", 1, 32),
    (r"(NUM_)?STAGES|\w+_STAGES", 1, 6),
    (r"(NUM_)?THREADS\w*|\w+_THREADS", 32, 1024),
    (r"ITEMS_PER_THREAD|UNROLL\w*|VEC\w*", 1, 16),
    (r"BLOCK\w*|TILE\w*|\w+_BLOCK|\w+_SIZE", 16, 65536),
)
# Tunables whose growth never shrinks shared memory or registers: tiles, blocks, pipeline stages.
GROWS_RESOURCES = re.compile(r"BLOCK\w*|TILE\w*|\w+_BLOCK|(NUM_)?STAGES|\w+_STAGES|num_stages@L\d+")
# Names that hold a problem's or the hardware's sizes, not a tuning choice.
NEVER_TUNED = re.compile(r"WARP_SIZE|\w*(BATCH|KERNEL|HIDDEN|FEATURE|CHANNEL|EMBED|SEQ|VOCAB|INPUT|OUTPUT)\w*")
LAUNCH_KEYWORDS = {"num_warps": (1, 32), "num_stages": (1, 6)}
CHANGES_PER_CHILD = ((1, 0.5), (2, 0.3), (3, 0.2))
RANDOM_TRIES_PER_CHILD = 30

_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+\(?(\d+)\)?(?![\w.])", re.M)
_CONSTEXPR = re.compile(r"\b(?:static\s+)?(?:constexpr|const)\s+(?:unsigned\s+)?(?:int|long|size_t|int32_t|int64_t|"
                        r"uint32_t)\s+([A-Za-z_]\w*)\s*=\s*(\d+)\s*;")


@dataclass
class Tunable:
    name: str  # the constant's name, or `num_warps@L120` for a launch keyword
    value: int
    sites: list[tuple[int, int]]  # character spans of the value's literal in the source
    lowest: int = 1
    highest: int = 1 << 30
    allowed: Optional[list[int]] = None  # from KGEN_TUNABLE

    def alternatives(self) -> list[int]:
        """Other values, the nearest first."""
        if self.allowed is not None:
            return sorted((v for v in set(self.allowed) if v != self.value), key=lambda v: (abs(v - self.value), v))
        return [v for v in (self.value * 2, self.value // 2) if self.lowest <= v <= self.highest]


@dataclass
class Starter:
    path: Path
    source: str
    language: str
    idea: Optional[str] = None


@dataclass
class Parent:
    source: str
    language: str
    candidate_id: Optional[int] = None
    origin: str = ""
    tunables: list[Tunable] = field(default_factory=list)
    shape: str = ""  # history.kernel_shape of the source: the kernel, numbers aside


def _line_offsets(source: str) -> list[int]:
    offsets, total = [0], 0
    for line in source.splitlines(keepends=True):
        total += len(line)
        offsets.append(total)
    return offsets


def _string_spans(source: str) -> list[tuple[int, int]]:
    offsets = _line_offsets(source)
    kinds = {tokenize.STRING} | {getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    spans = []
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in kinds:
                spans.append((offsets[tok.start[0] - 1] + tok.start[1], offsets[tok.end[0] - 1] + tok.end[1]))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    return spans


def declared_tunables(tree: ast.Module) -> Optional[dict[str, list[int]]]:
    """The module's KGEN_TUNABLE, if it declares one as a literal {name: [ints]}."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "KGEN_TUNABLE"
                                                 for t in node.targets)):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                return None
            if isinstance(value, dict):
                return {str(k): [int(v) for v in vs if isinstance(v, int)] for k, vs in value.items()
                        if isinstance(vs, (list, tuple))}
    return None


def _bounds(name: str) -> Optional[tuple[int, int]]:
    if NEVER_TUNED.fullmatch(name):
        return None
    for pattern, lowest, highest in TUNABLE_PATTERNS:
        if re.fullmatch(pattern, name):
            return lowest, highest
    return None


def find_tunables(source: str, exclude: frozenset[str] = frozenset()) -> list[Tunable]:
    """The tunable parameters of `source`, in source order (see the module docstring); `exclude`:
    lower-case names that never change."""
    tree = pyast.parse(source)
    offsets = _line_offsets(source)
    declared = declared_tunables(tree)
    named: dict[str, list[tuple[int, tuple[int, int]]]] = {}

    for node in tree.body:
        target, value = None, None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            target, value = node.target.id, node.value
        if target and isinstance(value, ast.Constant) and type(value.value) is int and value.lineno == value.end_lineno:
            line_start = offsets[value.lineno - 1]
            span = (line_start + value.col_offset, line_start + value.end_col_offset)
            named.setdefault(target, []).append((value.value, span))
    strings = _string_spans(source)
    for regex in (_DEFINE, _CONSTEXPR):
        for m in regex.finditer(source):
            if any(a <= m.start() and m.end() <= b for a, b in strings):
                named.setdefault(m.group(1), []).append((int(m.group(2)), m.span(2)))

    found: list[Tunable] = []
    for name, sites in named.items():
        values = {v for v, _ in sites}
        if len(values) != 1 or name.lower() in exclude:
            continue
        value = values.pop()
        spans = [s for _, s in sites]
        if declared is not None:
            if declared.get(name):
                found.append(Tunable(name, value, spans, allowed=declared[name]))
            continue
        bounds = _bounds(name)
        if bounds and value > 0 and value & (value - 1) == 0:
            found.append(Tunable(name, value, spans, *bounds))
    if declared is None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    if (kw.arg in LAUNCH_KEYWORDS and isinstance(kw.value, ast.Constant)
                            and type(kw.value.value) is int and kw.value.value > 0):
                        v = kw.value
                        start = offsets[v.lineno - 1] + v.col_offset
                        found.append(Tunable(f"{kw.arg}@L{v.lineno}", v.value,
                                             [(start, offsets[v.end_lineno - 1] + v.end_col_offset)],
                                             *LAUNCH_KEYWORDS[kw.arg]))
    return sorted(found, key=lambda t: t.sites[0])


def apply_changes(source: str, changes: list[tuple[Tunable, int]]) -> str:
    edits = sorted(((span, str(new)) for t, new in changes for span in t.sites), reverse=True)
    for (start, end), text in edits:
        source = source[:start] + text + source[end:]
    return source


def defines_model_new(source: str) -> bool:
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return False
    return any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body)


def _docstring_line(source: str) -> Optional[str]:
    try:
        doc = ast.get_docstring(pyast.parse(source))
    except SyntaxError:
        return None
    return doc.strip().splitlines()[0] if doc else None


def starters_dir_for(problem: Problem) -> Path:
    """Where a problem's starters are by default: `starters/<name>/` beside its file (the bundled
    problems keep theirs in problems/starters/<name>/); without that folder, the starters of the
    bundled problem whose Model is the same code (KernelBench's Softmax, LayerNorm and matmul files are
    the bundled ones at other sizes, and a starter reads its sizes from its inputs)."""
    own = problem.path.parent / "starters" / problem.name
    if own.is_dir():
        return own
    bundled = bundled_with_same_model(problem.source)
    if bundled is not None:
        log.info("offline proposer: %s has the same Model as the bundled problem %s; using its starters",
                 problem.name, bundled)
        return problems_dir() / "starters" / bundled
    return own


def _model_code(source: str) -> Optional[str]:
    """The `Model` class's code, docstrings and comments aside and `super(Model, self)` read as `super()`;
    None when the source does not parse or defines no Model class."""
    try:
        tree = pyast.parse(source)
    except SyntaxError:
        return None
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        return None
    for node in ast.walk(model):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.ClassDef, ast.FunctionDef)) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super":
            node.args = []
    return ast.dump(model, annotate_fields=False)


def bundled_with_same_model(source: str) -> Optional[str]:
    """The bundled problem (with starters) whose Model is the same code as this source's, if any."""
    code = _model_code(source)
    if code is None:
        return None
    for path in sorted(problems_dir().glob("*.py")):
        if (problems_dir() / "starters" / path.stem).is_dir() and _model_code(path.read_text()) == code:
            return path.stem
    return None


# What a user meets when there is nothing to start from: what a starter is, and the way around it.
STARTER_HELP = ("a starter is a Python file defining ModelNew (the Model's constructor and forward) that does the "
                "work in a Triton or CUDA kernel of its own; put some there or pass --starters DIR, or let an LLM "
                "write candidates: --proposer openai with OPENAI_BASE_URL (a local server) or OPENAI_API_KEY set")


def load_starters(problem: Problem, starters_dir: Optional[Path] = None, language: str = "any") -> list[Starter]:
    folder = starters_dir or starters_dir_for(problem)
    if starters_dir is not None and not starters_dir.is_dir():
        raise KgenError(f"starters folder not found: {starters_dir}")
    starters = []
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        if path.name.startswith("_"):
            continue
        try:
            source = path.read_text()
        except (OSError, UnicodeDecodeError) as e:
            raise KgenError(f"cannot read starter {path}: {e}") from e
        if not defines_model_new(source):
            log.warning("starter %s defines no ModelNew; skipped", path)
            continue
        starters.append(Starter(path, source, detect_language(source), _docstring_line(source)))
    if not starters:
        raise KgenError(f"the offline proposer has no starter kernels for {problem.name} (looked in {folder}): "
                        f"{STARTER_HELP}")
    if language != "any":
        starters = [s for s in starters if s.language == language]
        if not starters:
            raise KgenError(f"the offline proposer has no {language} starter kernels for {problem.name} (looked in "
                            f"{folder}); use --language any, or: {STARTER_HELP}")
    return starters


class OfflineProposer:
    name = "offline"
    model = None

    def __init__(self, *, problem: Problem, language: str = "any", seed: int = 0, starters_dir: Optional[Path] = None):
        self.language = language
        self.seed = seed
        self.starters = load_starters(problem, starters_dir, language)
        self.exclude = frozenset(k.lower() for k in problem.constants)
        self._too_big: dict[str, list[dict[str, int]]] = {}  # kernel shape -> configs that ran out of resources

    def _origin_of(self, starter: Starter) -> str:
        return f"starter {starter.path.parent.name}/{starter.path.name}"

    def propose(self, problem: Problem, history: History, n: int, round_index: int) -> list[Proposal]:
        if n <= 0:
            return []
        seen = set(history.tried_hashes)
        proposals: list[Proposal] = []
        for starter in self.starters:
            if len(proposals) < n and normalized_source_hash(starter.source) not in seen:
                seen.add(normalized_source_hash(starter.source))
                proposals.append(Proposal(source=starter.source, proposer=self.name, language=starter.language,
                                          idea=starter.idea, origin=self._origin_of(starter)))
        if len(proposals) < n:
            parents = self._parents(history)
            rng = random.Random(f"kgen-offline:{self.seed}:{round_index}")
            self._too_big = self._too_big_configs(history.out_of_resources)
            proposals += self._children(parents, n - len(proposals), seen, rng)
        if len(proposals) < n:
            log.warning("offline proposer: %d of %d candidates this round; every other retuning of the best "
                     "candidates was already tried", len(proposals), n)
        return proposals

    def _parents(self, history: History) -> list[Parent]:
        """The best candidates (of the language asked for) that have something to retune, fastest
        first; the starters when there are none."""
        best = [Parent(c.source, c.language, c.id, f"retuning of candidate #{c.id}") for c in history.best
                if self.language in ("any", c.language)]
        starters = [Parent(s.source, s.language, None, f"retuning of {self._origin_of(s)}") for s in self.starters]
        return self._tunable(best) or self._tunable(starters)

    def _tunable(self, parents: list[Parent]) -> list[Parent]:
        kept = []
        for parent in parents:
            try:
                parent.tunables = find_tunables(parent.source, self.exclude)
            except SyntaxError:
                continue
            if parent.tunables:
                parent.shape = kernel_shape(parent.source)
                kept.append(parent)
        return kept

    def _too_big_configs(self, sources: list[str]) -> dict[str, list[dict[str, int]]]:
        """Tunable values of the sources that ran out of on-chip resources, by kernel (numbers aside)."""
        configs: dict[str, list[dict[str, int]]] = {}
        for source in sources:
            try:
                values = {t.name: t.value for t in find_tunables(source, self.exclude)}
            except SyntaxError:
                continue
            if values:
                configs.setdefault(kernel_shape(source), []).append(values)
        return configs

    def _needs_too_much(self, parent: Parent, changes: list[tuple[Tunable, int]]) -> bool:
        failed = self._too_big.get(parent.shape)
        if not failed:
            return False
        child = {t.name: t.value for t in parent.tunables}
        child.update({t.name: v for t, v in changes})
        for values in failed:
            if values.keys() != child.keys():
                continue
            if all(child[k] >= v if GROWS_RESOURCES.fullmatch(k) else child[k] == v for k, v in values.items()):
                return True
        return False

    def _child(self, parent: Parent, changes: list[tuple[Tunable, int]], seen: set[str]) -> Optional[Proposal]:
        changes = sorted(changes, key=lambda change: change[0].sites[0])
        if self._needs_too_much(parent, changes):
            return None
        source = apply_changes(parent.source, changes)
        digest = normalized_source_hash(source)
        if digest in seen or not defines_model_new(source):
            return None
        seen.add(digest)
        idea = ", ".join(f"{t.name} {t.value}→{new}" for t, new in changes)
        return Proposal(source=source, proposer=self.name, language=parent.language,
                        parent_ids=[parent.candidate_id] if parent.candidate_id is not None else [],
                        idea=idea, origin=parent.origin)

    def _children(self, parents: list[Parent], n: int, seen: set[str], rng: random.Random) -> list[Proposal]:
        if not parents:
            return []
        children: list[Proposal] = []
        weights = [1.0 / (rank + 1) for rank in range(len(parents))]  # the fastest is the likeliest parent
        for _ in range(n * RANDOM_TRIES_PER_CHILD):
            if len(children) == n:
                return children
            parent = rng.choices(parents, weights)[0]
            k = rng.choices([k for k, _ in CHANGES_PER_CHILD], [w for _, w in CHANGES_PER_CHILD])[0]
            picked = rng.sample(parent.tunables, min(k, len(parent.tunables)))
            changes = []
            for t in picked:
                options = t.alternatives()
                if options:
                    near = options[:2] if rng.random() < 0.75 else options
                    changes.append((t, rng.choice(near)))
            child = self._child(parent, changes, seen) if changes else None
            if child is not None:
                children.append(child)
        return children + self._exhaustive(parents, n - len(children), seen, rng)

    def _exhaustive(self, parents: list[Parent], n: int, seen: set[str], rng: random.Random) -> list[Proposal]:
        """When random draws keep hitting tried sources: every one- and two-parameter retuning of
        every parent, best parent first, in a seeded order."""
        children: list[Proposal] = []
        for parent in parents:
            for size in (1, 2):
                options = [[(t, v) for t, v in zip(group, values)]
                           for group in combinations(parent.tunables, size)
                           for values in product(*(t.alternatives() for t in group))]
                rng.shuffle(options)
                for changes in options:
                    if len(children) == n:
                        return children
                    child = self._child(parent, changes, seen)
                    if child is not None:
                        children.append(child)
        return children

