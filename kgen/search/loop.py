"""The search: rounds of propose → compile → time → store, each round's proposer seeing what the
earlier rounds found.

    history   = build_history(db, problem, run)         # best candidates (diverse), recent failures
    proposals = proposer.propose(problem, history, N, k)
    stored    = queries.add_proposal(...) for each         # before evaluation: a kill loses nothing
    for each result as it finishes (workers.Stages):     # compile on CPUs, time one per GPU
        queries.add_evaluation(...)                        # committed at once
    run.rounds_done = k + 1                               # in order, once all of round k is stored

With a GPU here and a local cluster, the first round is proposed while Ray starts, and its first Triton
candidate judged by the driver itself meanwhile (kgen.search.driver_lane).

Rounds overlap by one: round k+1 is proposed once round k has left the compile stage, so CUDA builds
run while the GPUs time the round before (`--no-overlap` makes each round wait for the last). On a
GPU the baselines are timed in a thread while the first round compiles; no candidate is timed
until they are done.

A run's configuration lives in its row (`runs.settings`), so `--resume RUN_ID` goes on with the
same problem, size, seed and proposer, evaluating first the candidates the killed round had stored
but not evaluated, and never evaluating a stored result twice. The row also keeps the facts of the
machine that evaluates the run (kgen.judge.evaluator_facts, taken again at each start): its prompts
state those, wherever they are rendered.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Optional

from kgen.core import fmt
from kgen.core.errors import KgenError
from kgen.core.records import EvalResult, EvalSettings
from kgen.problems.problem import Problem, load_problem
from kgen.search.progress import SearchProgress
from kgen.store import queries
from kgen.store.db import Database, DatabaseUnavailableError, Run, db_option, open_db
from kgen.store.promotion import candidate_spread, promoted_best

CPU_CANDIDATES = 4  # per round without a GPU, where each candidate runs in Triton's interpreter
GPU_CANDIDATES = 8
NCU_MIN_S = 10.0  # a Nsight Compute profile needs a sandbox, torch, the replays: not started with less left
NCU_SHARE = 0.15  # of the search's time so far, at most, spent in Nsight Compute profiles (~12-16 s each on an H100)
# Seconds per round of Nsight Compute profiles, by default, for a proposer whose prompts show them (a model's). The
# offline and replay proposers read no prompt: a profile there held the GPU for nothing (16.7 s of a 138 s 3x8
# softmax search on the H100, benchmarks/RESULTS.md, issue 26), so their default is none (`--ncu-budget S` asks).
NCU_BUDGET_S = 60.0
PROFILE_READERS = ("openai",)


@dataclass
class SearchConfig:
    """Everything that defines a search; stored in the run's row, so a resumed run is the same search."""

    problem: str
    rounds: int = 10
    candidates: Optional[int] = None  # None: GPU_CANDIDATES with a GPU, CPU_CANDIDATES without
    proposer: Optional[str] = None  # None: proposers.default_proposer_kind()
    language: Optional[str] = None  # None: any with a GPU; triton without (CUDA could only be compiled)
    size: Optional[str] = None  # None: full with a GPU, small without
    seed: int = 0
    timeout_s: float = 300.0
    model: Optional[str] = None
    base_url: Optional[str] = None
    api_key_env: Optional[str] = None
    prompts_dir: Optional[str] = None
    replay_db: Optional[str] = None
    replay_run: Optional[int] = None
    proposer_options: dict = field(default_factory=dict)  # other make_proposer keywords (temperature ...)
    overlap: bool = True  # propose round k+1 once round k has compiled (see Search._rounds)
    starters_dir: Optional[str] = None  # the offline proposer's starter kernels (default: beside the problem)
    sandbox: str = "bwrap"  # "none": --no-sandbox (recorded with every result)
    # also time torch.compile(max-autotune): minutes of GPU time on a fresh DB that nothing in a search reads
    # (kgen bench --max-autotune shows it), so off
    baseline_max_autotune: bool = False
    price_in: Optional[float] = None  # USD per million LLM tokens in and out, for the cost ledger (kgen.store.ledger)
    price_out: Optional[float] = None
    # Nsight Compute profiles after each round (kgen.judge.ncu_profile); 0: none; None: NCU_BUDGET_S where the
    # proposer's prompts show them (PROFILE_READERS), else none
    ncu_budget_s: Optional[float] = None
    ncu_top: int = 2  # ... of the round's fastest new correct candidates (and each one's parent)

    @classmethod
    def from_settings(cls, settings: dict) -> SearchConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in settings.items() if k in known})


@dataclass
class SearchSummary:
    """How a search ended, and its best candidate."""

    run_id: int
    status: str
    problem: str
    device: str
    rounds_done: int
    rounds_planned: int
    candidates: int
    correct: int
    best_id: Optional[int] = None
    best_runtime_ms: Optional[float] = None
    best_speedup_eager: Optional[float] = None
    best_speedup_compile: Optional[float] = None
    best_roofline_pct: Optional[float] = None
    tokens_in: int = 0
    tokens_out: int = 0
    calls_without_tokens: int = 0  # replies whose server reported no usage (not counted in the tokens)
    wall_s: float = 0.0
    timed: bool = True
    startup: dict = field(default_factory=dict)  # where the search's own seconds went (Search.startup)
    stop_reason: Optional[str] = None  # why it ended before its last round (the proposer ran out)


FULL_SIZE_ON_CPU_NOTE = (
    "the full size without a GPU: at this size the judge's own work on a CPU (float64 reference outputs, "
    "checking each output against them) takes tens of seconds per trial, so results come minutes after "
    "--timeout would suggest (that work is not charged to the candidate's --timeout); --size small is the size "
    "for a CPU")


def no_gpu_note(language: str) -> str:
    """What a search without a GPU says once, at its start."""
    note = ("No GPU: candidates run under Triton's interpreter; no timings are measured, and candidates are ranked "
            "by correctness only. Kernel profiles are off (no GPU here).")
    if language != "triton":
        note += (" CUDA candidates are only compiled (with nvcc, where it exists), never run or verified: they are "
                 "reported not_run.")
    return note


def validate(config: SearchConfig) -> None:
    """Bad configuration is a one-line KgenError, raised before any cluster or run exists. Settings
    still None are fine: resolve_defaults fills them."""
    from kgen.core.records import LANGUAGE_CHOICES, PROPOSER_KINDS

    if config.rounds < 1:
        raise KgenError(f"--rounds must be at least 1 (got {config.rounds})")
    if config.candidates is not None and config.candidates < 1:
        raise KgenError(f"--candidates must be at least 1 (got {config.candidates})")
    if config.timeout_s <= 0:
        raise KgenError(f"--timeout must be positive (got {config.timeout_s})")
    if config.proposer is not None and config.proposer not in PROPOSER_KINDS:
        raise KgenError(f"unknown proposer '{config.proposer}' (choose {', '.join(PROPOSER_KINDS)})")
    if config.language is not None and config.language not in LANGUAGE_CHOICES:
        raise KgenError(f"unknown language '{config.language}' (choose {', '.join(LANGUAGE_CHOICES)})")
    from kgen.store.ledger import flag_prices

    flag_prices(config.price_in, config.price_out)  # both or neither, each a number 0 or more
    if config.starters_dir is not None and config.proposer != "offline":
        raise KgenError(f"--starters is for the offline proposer (this search uses --proposer {config.proposer})")


def resolve_defaults(config: SearchConfig) -> SearchConfig:
    """Fill the defaults that depend on this machine and its environment."""
    import torch

    from kgen.proposers import default_proposer_kind

    gpu = torch.cuda.is_available()
    if config.proposer is None:
        config.proposer = default_proposer_kind()
    if config.size is None:
        config.size = "full" if gpu else "small"
    if config.language is None:
        config.language = "any" if gpu else "triton"
    if config.candidates is None:
        config.candidates = GPU_CANDIDATES if gpu else CPU_CANDIDATES
    if config.ncu_budget_s is None:
        config.ncu_budget_s = NCU_BUDGET_S if config.proposer in PROFILE_READERS else 0.0
    return config


def _check(config: Optional[SearchConfig]) -> Problem:
    if config is None:
        raise KgenError("nothing to search: give a problem, or a run to resume")
    validate(resolve_defaults(config))
    problem = load_problem(config.problem, config.size)
    if config.proposer == "offline":  # no starters is bad input: say so before any DB file exists
        from kgen.proposers.offline import load_starters

        load_starters(problem, Path(config.starters_dir) if config.starters_dir else None, config.language)
    return problem


def make_proposer(config: SearchConfig, problem: Problem):
    from kgen import proposers

    options = dict(config.proposer_options)
    for name in ("model", "base_url", "api_key_env", "replay_run"):
        if getattr(config, name) is not None:
            options[name] = getattr(config, name)
    if config.prompts_dir is not None:
        options["prompts_dir"] = config.prompts_dir
    if config.replay_db is not None:
        options["replay_db"] = config.replay_db
    if config.starters_dir is not None:
        options["starters_dir"] = config.starters_dir
    return proposers.make_proposer(config.proposer, problem=problem, language=config.language, seed=config.seed,
                                   **options)


def load_run(db: Database, run_id: int) -> tuple[SearchConfig, Run]:
    """The configuration of a run to resume, or a one-line KgenError saying why it cannot be."""
    run = queries.get_run(db, run_id)
    if run is None:
        raise KgenError(f"no run {run_id} in {db.url}")
    if run.status == "finished":
        raise KgenError(f"run {run_id} is already finished ({run.rounds_done} of {run.rounds_planned} rounds)")
    config = SearchConfig.from_settings(dict(run.settings or {}))
    if not config.problem:
        raise KgenError(f"run {run_id} holds no search settings to resume from")
    return config, run


class Search:
    """One search on one cluster: the loop over rounds, storing every result as it arrives."""

    def __init__(self, db: Database, config: SearchConfig, problem: Problem, proposer, progress: SearchProgress,
                 run_id: Optional[int] = None):
        self.db = db
        self.config = config
        self.problem = problem
        self.proposer = proposer
        self.progress = progress
        self.run_id = run_id
        self.started = time.monotonic()
        self._ncu_s, self._ncu_last_s = 0.0, 0.0  # seconds in Nsight Compute profiles: in all, the last one
        self._ncu_off = False  # ncu cannot run here: said once, then no more profiles in this search
        self.stop_reason: Optional[str] = None
        # Where the seconds before and around the candidates went, from the search's start: ray_start_s (a
        # cluster started for this search), machine_facts_s (this machine's facts in, with a local GPU),
        # evaluators_s (until the first evaluator answered), first_proposed_s (the first round stored and sent
        # to compile), baselines_s (their timing, beside the first compiles), first_on_gpu_s and
        # first_result_s, warm_up_s (each evaluator's one-time judge work before its first candidate, a list);
        # and the judge's phases summed over the evaluations (judge_s). Stored in the run's settings and shown
        # by kgen bench.
        self.startup: dict = {}
        self.judge_s: dict[str, float] = {}
        self._early_facts: Optional[Future] = None  # this machine's facts, measured while its cluster starts
        self._background: list[Future] = []  # what prepare_beside_cluster_start began (the roofline, the facts)
        # kgen.search.driver_lane: the first candidate judged here while the cluster starts (begin_beside_cluster_
        # start); _begun holds the run's opening done meanwhile, _first_jobs the round it proposed
        self._lane = None
        self._begun: Optional[Future] = None
        self._first_jobs: Optional[tuple[int, list]] = None

    def prepare_beside_cluster_start(self) -> None:
        """Work that needs no cluster, begun in a thread while a local cluster starts (Ray's start uses CPUs,
        never the GPU): with a GPU here, this machine's facts first (kgen.judge.evaluator_facts.this_machine: on
        a fresh cache its GPU's ceilings, CUDA-event times of kernels queued back to back), then the problem's
        roofline once (its first meta run imports torch's decompositions, 0.8 s on an idle CPU and 1.9 s beside
        Ray's start here, on the way to the first round's proposals). One thread, so the two never import
        torch's parts at once. Where the cluster is joined `run` asks as before. Beside them, the sandbox's probe
        (kgen.judge.sandbox.probe_early, as root: a sandboxed `import torch`), whose yes this machine's
        evaluators then read from kgen's cache instead of each probing before its first sandbox can start."""
        import torch

        from kgen.judge import fused_compare
        from kgen.judge.evaluator_facts import this_machine
        from kgen.judge.sandbox import probe_early
        from kgen.problems.roofline import compute_roofline

        if self.config.sandbox == "bwrap":
            probe_early(torch.cuda.is_available())
        facts: Optional[Future] = Future() if torch.cuda.is_available() else None

        def prepare() -> None:
            if facts is not None:
                try:
                    facts.set_result(this_machine())
                except BaseException as e:  # noqa: BLE001 - raised where run() asks for the facts
                    facts.set_exception(e)
            compute_roofline(self.problem)
            if facts is not None:  # the judge's fused compare, compiled into Triton's cache for the evaluators
                with contextlib.suppress(Exception):
                    fused_compare.warm(torch.device("cuda"), getattr(torch, self.problem.dtype))

        self._early_facts = facts
        self._background.append(_in_background("kgen-prepare", prepare))

    def begin_beside_cluster_start(self, spares=None) -> None:
        """With the driver lane (kgen.search.driver_lane.wanted; a new run on a local cluster): its sandboxes start
        now, and a thread opens the run, proposes the first round and has the lane judge its first Triton
        candidate while the main thread starts Ray. Call after prepare_beside_cluster_start (whose facts the run
        states, measured before the lane's judge touches the GPU)."""
        import torch

        from kgen.search import driver_lane

        gpu = torch.cuda.is_available()
        # a model's first reply outlasts the cluster's start: nothing to gain there (and Ctrl-C would wait for it);
        # without the sandbox a candidate could reach its runner's parent, here the search itself
        if (self.run_id is not None or self.config.proposer == "openai" or self.config.sandbox != "bwrap"
                or not driver_lane.wanted(gpu)):
            if spares is not None:  # started on a guess that torch does not confirm
                spares.close()
            return
        self._lane = driver_lane.DriverLane(self.problem, self.config.sandbox, "cuda" if gpu else "cpu",
                                            spares=spares)
        prepared = list(self._background)
        self._begun = _in_background("kgen-begin", lambda: self._begin_early(gpu, prepared))
        self._background.append(self._begun)

    def _begin_early(self, gpu: bool, prepared: list[Future]):
        """What `run` does before its first round that needs no cluster, and the first round's proposals, one of
        them handed to the lane: (device, settings, baselines thread, rounds done). It waits for the preparation
        thread first: the facts' ceilings are measured with the GPU to themselves, and no two threads import
        torch's parts at once (the roofline's meta run, the judge's)."""
        from kgen.judge.evaluator_facts import this_machine
        from kgen.search.cluster import evaluator_placement
        from kgen.search.workers import Device, gpu_device

        for future in prepared:
            with contextlib.suppress(BaseException):  # the facts' failure is raised by _machine_facts below
                future.exception()
        device = gpu_device() if gpu else Device(name="cpu", cuda_arch=None)
        facts = self._machine_facts() if gpu else this_machine()
        if gpu:
            self._since_start("machine_facts_s")
        import torch

        # the evaluators a local cluster of this machine will have (kgen.search.cluster's placement)
        resources = {"CPU": float(len(os.sched_getaffinity(0))), "GPU": float(torch.cuda.device_count())}
        placement = evaluator_placement([{"NodeID": "local", "Alive": True, "Resources": resources}])
        settings, baselines, rounds_done = self._begin(device, facts, placement.count,
                                                       placement.count // placement.per_gpu)
        if not STOP_REQUESTED.is_set() and rounds_done < self.config.rounds:
            self.progress.round_started(rounds_done)
            jobs = self._round_jobs(rounds_done)
            if jobs is not None:
                self._first_jobs = (rounds_done, jobs)
                self._lane.take(jobs, settings)
        return device, settings, baselines, rounds_done

    def settle_background(self) -> None:
        """Wait for the work begun beside the cluster's start: a search that stops early (the cluster would not
        start) must not leave Python while a thread is inside torch (its exit would abort the process)."""
        for future in self._background:
            with contextlib.suppress(BaseException):
                future.exception()
        if self._lane is not None:
            self._lane.close()

    def _machine_facts(self):
        """This machine's facts: those measured while the cluster started, else measured now."""
        from kgen.judge.evaluator_facts import this_machine

        return self._early_facts.result() if self._early_facts is not None else this_machine()

    @staticmethod
    def _local_gpu(cluster):
        """This machine's GPU (kgen.search.workers.Device) where the evaluators are known to use it (a local
        cluster on a machine with one), else None (a joined cluster's evaluators say which device they have)."""
        import torch

        from kgen.search.workers import gpu_device

        if getattr(cluster, "address", "joined") is None and torch.cuda.is_available():
            return gpu_device()
        return None

    def _since_start(self, name: str) -> None:
        self.startup.setdefault(name, round(time.monotonic() - self.started, 3))

    def _settings(self, device: str) -> tuple[EvalSettings, Optional[threading.Thread]]:
        """The evaluation settings, and (on a GPU) the thread timing the baselines (DeferredBaselines: started at
        the first result), which fills the settings' baseline fields before it ends. Every GPU takes candidates
        meanwhile: the GPU's timing lock (kgen.judge.gpu_lock) keeps the baselines' timed runs and a candidate's
        apart (a baseline timed beside a candidate would skew both), so only those wait."""
        from kgen.problems.roofline import floors

        settings = EvalSettings(device="cuda" if device != "cpu" else "cpu", size=self.problem.size,
                                timeout_s=self.config.timeout_s, sandbox=self.config.sandbox)
        if settings.device == "cpu":
            return settings, None
        settings.floor_ms, settings.impossible_ms = floors(self.problem, settings.rtol)
        variants = "eager, torch.compile, max-autotune" if self.config.baseline_max_autotune else "eager, torch.compile"
        thread = DeferredBaselines(threading.Thread(target=self._time_baselines, args=(settings, device), daemon=True,
                                                    name="kgen-baselines"))
        # an LLM's first reply takes longer than the baselines: they go beside it, as they always did
        if os.environ.get("KGEN_BASELINES_AT_START") == "1" or self.config.proposer == "openai":
            self.progress.note(f"timing the baselines ({variants}; cached in the DB) while the first candidates are "
                               "judged ...")
            thread.start_once()
        else:
            self.progress.note(f"the baselines ({variants}; cached in the DB) are timed once the first candidate is "
                               "judged; speedups follow then")
        return settings, thread

    def _time_baselines(self, settings: EvalSettings, device: str) -> None:
        """The baselines, compiled while the evaluators' sandboxes start and the first candidates are judged,
        and timed under their GPU's timing lock."""
        from kgen.store.baselines import get_baselines

        started = time.monotonic()
        try:
            baselines = get_baselines(self.db, self.problem, device, max_autotune=self.config.baseline_max_autotune)
        except Exception as e:  # noqa: BLE001 - no baselines means no speedups, not a failed search
            self.progress.note(f"the baselines could not be timed ({type(e).__name__}: {e}); speedups stay empty")
            return
        finally:
            self.startup["baselines_s"] = round(time.monotonic() - started, 3)
        if baselines is not None:
            settings.baseline_eager_ms, settings.baseline_compile_ms = baselines[0], baselines[1]

    def run(self, cluster) -> SearchSummary:
        from kgen.search.workers import Stages

        if self._begun is not None:  # opened (and the first round proposed) while the cluster started
            device, settings, baselines, rounds_done = self._begun.result()
            stages = Stages(cluster, str(self.problem.path), self.problem.size, self.problem.source_hash,
                            prestart=(self.config.sandbox, self.config.language))
            stages.prestart(self.config.sandbox, self.config.language)
        else:
            device = self._local_gpu(cluster)  # the evaluators' GPU is this machine's: no need to ask them
            # the machine the prompts state (kgen.judge.evaluator_facts): with a local GPU this one, measured
            # before the evaluators' sandboxes start so nothing disturbs its ceilings; else asked of an evaluator
            facts = self._machine_facts() if device is not None else None
            if facts is not None:
                self._since_start("machine_facts_s")
            stages = Stages(cluster, str(self.problem.path), self.problem.size, self.problem.source_hash,
                            prestart=(self.config.sandbox, self.config.language))
            stages.prestart(self.config.sandbox, self.config.language)  # sandboxes start while the baselines compile
            if device is None:
                device = stages.device()
                self._since_start("evaluators_s")
            settings, baselines, rounds_done = self._begin(device, facts or stages.evaluator_facts(),
                                                           stages.evaluator_count,
                                                           stages.evaluator_count // getattr(stages, "per_gpu", 1))
        try:
            self._rounds(stages, settings, rounds_done, device.name, baselines)
        finally:
            warm_up = stages.warm_up_s() if hasattr(stages, "warm_up_s") else []
            if warm_up:  # each evaluator's one-time judge work, done before its first candidate (Judge.warm_up)
                self.startup["warm_up_s"] = warm_up
            started = stages.start_figures() if hasattr(stages, "start_figures") else []
            if started:  # each evaluator's process age when kgen's code began, and its own start's seconds
                self.startup["evaluator_start"] = started
            stages.close()
            if stages.first_answer is not None:  # with a local GPU nothing waited for it: when it came
                self.startup.setdefault("evaluators_s", round(stages.first_answer - self.started, 3))
            self._store_startup()
        queries.set_run_status(self.db, self.run_id, "finished")
        return self.summary("finished", timed=device.name != "cpu")

    def _begin(self, device, facts, evaluators: Optional[int], gpus: Optional[int] = None):
        """The run opened (or marked running again) with the machine its prompts state, the progress started, the
        settings made (and on a GPU the baselines' thread): (settings, baselines thread, rounds done).
        `evaluators`: how many there are (predicted, for a local cluster not up yet); `gpus`: the GPUs they share
        (kept with the run: kgen bench's per-GPU figures), by default one each."""
        # the baselines need no evaluator: they start while the evaluators do, and the first round is proposed
        # and compiled meanwhile
        settings, baselines = self._settings(device.name)
        settings.cuda_arch = device.cuda_arch
        resumed = self.run_id is not None
        gpus = gpus if gpus is not None else evaluators
        rounds_done = self._open_run(device.name, max(gpus or 0, 1 if evaluators else 0) if device.name != "cpu" else 0)
        # stored before the first prompt, which reads it back (kgen.store.history), as a resumed run's and
        # any later render of this run's prompts do
        queries.set_run_evaluator(self.db, self.run_id, facts)
        self.progress.start(run_id=self.run_id, problem=self.problem.name, size=self.problem.size,
                            device=device.name, proposer=self.config.proposer, rounds_total=self.config.rounds,
                            rounds_done=rounds_done, evaluators=evaluators, resumed=resumed)
        self._seed_counts()
        if device.name == "cpu":
            self.progress.note(no_gpu_note(self.config.language))
            if self.problem.size == "full":
                self.progress.note(FULL_SIZE_ON_CPU_NOTE[0].upper() + FULL_SIZE_ON_CPU_NOTE[1:] + ".")
        return settings, baselines, rounds_done

    def _rounds(self, stages, settings: EvalSettings, first_round: int, device: str,
                baselines: Optional[threading.Thread]) -> None:
        """The round loop. With `overlap` (the default) round k+1 is proposed as soon as every candidate
        of round k has left the compile stage, so its compiles (CUDA builds take most of a minute) run
        while round k is timed and the GPUs never wait on compilers between rounds; it then sees the
        results finished by that time (round k-1 in full, round k in part). Rounds are counted done in
        order, once all their candidates are, so a resumed run picks up every round still open."""
        open_rounds: dict[int, set[int]] = {}  # round -> its candidates not evaluated yet
        round_of: dict[int, int] = {}
        timing: set[int] = set()
        early: dict[int, int] = {}  # candidate id -> its evaluation, stored before the baselines were in
        next_round, exhausted = first_round, False
        max_open = 2 if self.config.overlap else 1
        limit = max_open  # propose while fewer rounds than this are open
        while True:
            if STOP_REQUESTED.is_set():
                raise KeyboardInterrupt
            while (not exhausted and next_round < self.config.rounds and len(open_rounds) < limit
                   and stages.compiling_count == 0):
                if self._first_jobs is not None and self._first_jobs[0] == next_round:
                    # proposed while the cluster started (begin_beside_cluster_start); the lane may have one
                    jobs = self._first_jobs[1]
                    self._first_jobs = None
                else:
                    self.progress.round_started(next_round)
                    jobs = self._round_jobs(next_round)
                if jobs is None and open_rounds:
                    # Asked ahead, before the open rounds were timed, a proposer can have nothing new yet
                    # (the offline one retunes the best *timed* candidates): ask again once one finishes.
                    self.progress.note(f"  waiting for round {min(open_rounds) + 1}'s results before proposing more")
                    limit = len(open_rounds)
                    break
                if jobs is None:
                    self.stop_reason = f"the {self.config.proposer} proposer had nothing more to propose"
                    self.progress.note(f"the {self.config.proposer} proposer has nothing more to propose; stopping")
                    exhausted = True
                    break
                limit = max_open
                open_rounds[next_round] = {job.candidate_id for job in jobs}
                round_of.update((job.candidate_id, next_round) for job in jobs)
                lane_job = self._lane.job if self._lane is not None else None
                to_stages = [job for job in jobs if job is not lane_job]
                for event in stages.submit(to_stages, settings):
                    self.progress.compiling(event.candidate_id)
                if len(to_stages) < len(jobs):
                    self.progress.compiling(self._lane.job.candidate_id)
                    self.progress.note(f"  candidate {self._lane.job.candidate_id} is judged here, in the driver, "
                                       "while the evaluators start")
                self._since_start("first_proposed_s")
                next_round += 1
            while open_rounds and not open_rounds[min(open_rounds)]:
                done_round = min(open_rounds)
                del open_rounds[done_round]
                queries.set_run_status(self.db, self.run_id, "running", rounds_done=done_round + 1)
                self.progress.round_finished(done_round)
                if device != "cpu":
                    self._stall_profiles(stages, settings, done_round)
            if not open_rounds and (exhausted or next_round >= self.config.rounds):
                if early and baselines is not None:  # every candidate done before the baselines: wait for them
                    baselines.join()
                    self._late_baselines(settings, early)
                return
            baselines_in = baselines is None or not baselines.is_alive()
            if baselines_in and early:
                self._late_baselines(settings, early)
            # every GPU takes candidates, the driver lane's included: their timed runs and the baselines' take
            # turns, their untimed work goes on side by side (kgen.judge.gpu_lock)
            lane_events = self._lane_events(stages, settings)
            for event in lane_events + stages.poll():
                if event.kind == "timing":
                    self._since_start("first_on_gpu_s")
                    timing.add(event.candidate_id)
                    self.progress.timing(event.candidate_id)
                elif event.kind == "requeued":  # its worker or node died (or kgen's harness failed): again
                    self.progress.requeued(event.candidate_id, event.note, event.candidate_id in timing)
                    timing.discard(event.candidate_id)
                else:
                    self._since_start("first_result_s")
                    if baselines is not None and hasattr(baselines, "start_once"):
                        baselines.start_once()  # after the first result (DeferredBaselines), once
                    self._add_judge_phases(event.result)
                    before_baselines = event.result.eager_ms is None and settings.device != "cpu"
                    if before_baselines and baselines_in:  # sent before the baselines were in, back after
                        event.result.set_baselines(settings.baseline_eager_ms, settings.baseline_compile_ms)
                    evaluation_id = queries.add_evaluation(self.db, event.candidate_id, event.result)
                    self._race_against(settings, event.result)
                    if before_baselines and not baselines_in:
                        early[event.candidate_id] = evaluation_id
                    self.progress.evaluated(event.candidate_id, event.result, event.candidate_id in timing)
                    open_rounds.get(round_of.pop(event.candidate_id, -1), set()).discard(event.candidate_id)

    def _lane_events(self, stages, settings: EvalSettings) -> list:
        """The driver lane's events; a candidate it gave up on goes to the stages (said once)."""
        if self._lane is None:
            return []
        from kgen.search.workers import StageEvent

        events, back = self._lane.poll()
        if self._lane.began is not None:  # on the GPU since then, while the cluster started
            self.startup.setdefault("first_on_gpu_s", round(self._lane.began - self.started, 3))
        if self._lane.finished is not None:
            self.startup.setdefault("lane_result_s", round(self._lane.finished - self.started, 3))
        if back:
            stages.submit(back, settings)
            events += [StageEvent("requeued", job.candidate_id, note=self._lane.note) for job in back]
        return events

    @staticmethod
    def _race_against(settings: EvalSettings, result) -> None:
        """With KGEN_RACE=1 the candidates judged from now on race the best correct time so far: one clearly
        slower stops timing after kgen.judge.timing.RACE_RUNS runs (its figure from those; its details say
        `raced`). Not the default: on a cold H100 the 3x8 softmax search's later evaluations took 4.65 s
        (median) with it and 4.63 s without (RESULTS.md, fifteenth session)."""
        if os.environ.get("KGEN_RACE") != "1" or settings.device == "cpu" or result.outcome != "correct":
            return
        ms = result.runtime_ms
        if isinstance(ms, (int, float)) and ms > 0 and (settings.race_ms is None or ms < settings.race_ms):
            settings.race_ms = float(ms)

    def _late_baselines(self, settings: EvalSettings, early: dict[int, int]) -> None:
        """The baselines are in: the evaluations stored before them get their speedups (in the DB and in
        the best-so-far)."""
        if settings.baseline_eager_ms is not None or settings.baseline_compile_ms is not None:
            queries.set_baselines(self.db, list(early.values()), settings.baseline_eager_ms,
                                  settings.baseline_compile_ms)
            counts = getattr(self.progress, "counts", None)
            for candidate_id in early:
                seen = counts.correct_seen.get(candidate_id) if counts is not None else None
                if seen is None:
                    continue
                spread, _ = seen
                result = EvalResult(outcome="correct", runtime_ms=spread.median_ms)
                result.set_baselines(settings.baseline_eager_ms, settings.baseline_compile_ms)
                counts.consider_best(candidate_id, result.speedup_eager, result.speedup_compile, spread)
            self.progress.note(f"  the baselines are in: speedups added to {len(early)} candidate(s) evaluated "
                               "meanwhile")
        early.clear()

    def _stall_profiles(self, stages, settings: EvalSettings, round_index: int) -> None:
        """Nsight Compute profiles of the round's best new candidates and their parents, within
        `ncu_budget_s` (kgen.judge.ncu_profile); the next prompts show them. Off for the rest of the run,
        said once, when ncu cannot run here."""
        budget = float(self.config.ncu_budget_s or 0)
        if budget <= 0 or self._ncu_off or not hasattr(stages, "ncu_profile"):
            return
        from kgen.problems.roofline import compute_roofline

        started = time.monotonic()
        profiled = []
        from kgen.store.history import build_history

        # first the parents the next prompt will show (where the profile is read), then the round's best
        shown = tuple(c.id for c in build_history(self.db, self.problem, run_id=self.run_id).best)
        targets = queries.ncu_targets(self.db, self.run_id, round_index, self.config.ncu_top, first=shown)
        min_bytes = compute_roofline(self.problem).bytes_moved if targets else None  # what "x the minimum" is against
        for k, (candidate_id, source) in enumerate(targets):
            left = budget - (time.monotonic() - started)
            # the evaluator waits while ncu runs: profiles may take NCU_SHARE of the search's time so far
            share_left = NCU_SHARE * (time.monotonic() - self.started) - self._ncu_s
            if min(left, share_left) < max(NCU_MIN_S, self._ncu_last_s):
                self.progress.note(f"  Nsight Compute: {len(targets) - k} candidate(s) of round {round_index + 1} "
                                   f"not profiled (at most {budget:g} s per round, --ncu-budget, and "
                                   f"{NCU_SHARE:.0%} of the search's time)")
                break
            asked = time.monotonic()
            profile = stages.ncu_profile(source, settings, left)
            if "unavailable" in profile:
                self._ncu_off = True
                self.progress.note(f"stall profiles are off: {profile['unavailable']}")
                return
            took = time.monotonic() - asked
            self._ncu_s += took
            self._ncu_last_s = took
            profile["min_bytes"] = min_bytes
            queries.set_ncu_profile(self.db, candidate_id, profile)
            profiled.append(f"#{candidate_id}" + (" (failed)" if profile.get("error") else ""))
        if profiled:
            self.progress.note(f"  Nsight Compute profiled {', '.join(profiled)} in "
                               f"{time.monotonic() - started:.1f} s")

    def _add_judge_phases(self, result) -> None:
        phases = result.details.get("phases") if isinstance(result.details, dict) else None
        for name, seconds in (phases if isinstance(phases, dict) else {}).items():
            if isinstance(seconds, (int, float)):
                self.judge_s[name] = round(self.judge_s.get(name, 0.0) + seconds, 3)

    def _store_startup(self) -> None:
        """The startup figures and summed judge phases, into the run's settings (kgen bench reads them)."""
        self.startup["judge_s"] = dict(self.judge_s)
        if self.run_id is not None:
            with contextlib.suppress(DatabaseUnavailableError):  # figures, not results: nothing else depends on them
                queries.set_run_startup(self.db, self.run_id, self.startup)

    def _open_run(self, device: str, gpus: int) -> int:
        """Create the run, or mark the resumed one running again; the rounds it has done."""
        config, problem = self.config, self.problem
        if self.run_id is None:
            self.run_id = queries.create_run(
                self.db, problem=problem.name, problem_path=str(problem.path), problem_hash=problem.source_hash,
                size=problem.size, proposer=config.proposer, model=getattr(self.proposer, "model", None),
                language=config.language, seed=config.seed, rounds=config.rounds,
                candidates_per_round=config.candidates, settings=dict(asdict(config), gpus=gpus), device=device)
        else:
            queries.set_run_status(self.db, self.run_id, "running")
        queries.set_run_process(self.db, self.run_id)
        return queries.get_run(self.db, self.run_id).rounds_done

    def _round_jobs(self, round_index: int):
        """This round's candidates to evaluate: new proposals, each stored first; or, for a round a
        killed search had begun, its stored candidates not yet evaluated. None: the proposer is done."""
        from kgen.search.workers import Job
        from kgen.store.history import build_history

        stored = queries.round_candidates(self.db, self.run_id, round_index)
        if stored:
            evaluated = queries.evaluated_candidate_ids(self.db, self.run_id)
            jobs = [Job(cid, source) for cid, source in stored if cid not in evaluated]
            self.progress.resumed_round(len(stored), len(jobs))
            return jobs
        history = build_history(self.db, self.problem, run_id=self.run_id)  # the run's stored evaluator
        proposals = self.proposer.propose(self.problem, history, self.config.candidates, round_index)
        if not proposals:
            return None
        jobs = []
        for proposal in proposals:
            cid = queries.add_proposal(self.db, proposal, run_id=self.run_id, round_index=round_index,
                                       problem=self.problem.name, problem_hash=self.problem.source_hash)
            if proposal.source:  # no code: stored with its no_code outcome, nothing to evaluate
                jobs.append(Job(cid, proposal.source))
        self.progress.proposed(len(proposals), len(proposals) - len(jobs))
        return jobs

    def _seed_counts(self) -> None:
        """On resume, the best so far includes what earlier sessions of this run found."""
        for c in sorted(queries.correct_candidates(self.db, run_id=self.run_id), key=lambda c: c.id):
            self.progress.counts.consider_best(c.id, c.speedup_eager, c.speedup_compile, candidate_spread(c))

    def summary(self, status: str, timed: bool = True) -> SearchSummary:
        run = queries.get_run(self.db, self.run_id)
        correct = queries.correct_candidates(self.db, run_id=self.run_id)
        tokens_in, tokens_out, unreported = queries.run_tokens(self.db, self.run_id)
        summary = SearchSummary(run_id=self.run_id, status=status, problem=self.problem.name, device=run.device or "-",
                                rounds_done=run.rounds_done, rounds_planned=run.rounds_planned,
                                candidates=queries.candidate_count(self.db, self.run_id),
                                correct=len(correct), tokens_in=tokens_in, tokens_out=tokens_out,
                                calls_without_tokens=unreported,
                                wall_s=time.monotonic() - self.started, timed=timed, stop_reason=self.stop_reason,
                                startup=dict(self.startup))
        if correct:  # the first found, replaced only by one that beats it beyond the timing noise
            best = promoted_best(sorted(correct, key=lambda c: c.id), candidate_spread)
            summary.best_id = best.id
            summary.best_runtime_ms = best.runtime_ms
            summary.best_speedup_eager = best.speedup_eager
            summary.best_speedup_compile = best.speedup_compile
            summary.best_roofline_pct = best.roofline_pct
        return summary


def _in_background(name: str, work) -> Future:
    """`work()` run in a daemon thread; the future holds its result, or the exception it raised for whoever
    waits on it."""
    future: Future = Future()

    def run() -> None:
        try:
            future.set_result(work())
        except BaseException as e:  # noqa: BLE001 - handed to the thread that waits on the future
            future.set_exception(e)

    threading.Thread(target=run, daemon=True, name=name).start()
    return future


class DeferredBaselines:
    """The thread timing a search's baselines on a local GPU, started at the search's first result. Started with
    the search (as before the twelfth session), torch.compile's compile (Dynamo, Inductor and its compile worker
    processes, ~20 s on a cold machine) ran beside the first evaluation and its sandboxes' imports, and the
    baselines' timed runs held the GPU's timing lock in its middle (1.2 s of the first evaluation's 14.2 s on a
    cold H100): the first result waited for work whose only product, the speedups, can come later (the evaluations
    stored before it get theirs when it is in). With the openai proposer it starts at once: the model's first reply
    takes longer than the baselines, which then go beside it. KGEN_BASELINES_AT_START=1 starts it at once (an A/B)."""

    def __init__(self, thread: threading.Thread):
        self.thread = thread

    @property
    def started(self) -> bool:
        return self.thread.ident is not None  # set by Thread.start before it returns

    def start_once(self) -> None:
        if not self.started:
            self.thread.start()

    def is_alive(self) -> bool:
        """True until the baselines are in: not started yet counts as still to come."""
        return not self.started or self.thread.is_alive()

    def join(self, timeout: Optional[float] = None) -> None:
        self.start_once()
        self.thread.join(timeout)


# Set by the CLI's SIGINT/SIGTERM handler (request_stop) as it raises KeyboardInterrupt; the round loop
# checks it too, so an interrupt swallowed on its way up (inside a library call) still stops the run.
STOP_REQUESTED = threading.Event()


def request_stop(signum=None, frame=None) -> None:
    """Signal handler: stop the search as Ctrl-C does (the run is marked interrupted)."""
    STOP_REQUESTED.set()
    raise KeyboardInterrupt


def run_search(db: Database | str | None, config: Optional[SearchConfig] = None, *,
               resume_run_id: Optional[int] = None, ray_address: Optional[str] = None,
               progress: Optional[SearchProgress] = None, cluster=None, lane_spares=None) -> SearchSummary:
    """Run (or resume) a search to its end. `db`: an open Database, or a URL/path opened once the
    configuration has been checked (bad input creates no file). `cluster`: a kgen.search.cluster.Cluster the
    caller connected and will shut down (kgen bench runs its searches on one); else one is started or
    joined (`ray_address`) for this search. Ctrl-C marks the run interrupted and re-raises
    KeyboardInterrupt; any other failure marks it failed and re-raises. `lane_spares`: the driver lane's
    sandboxes, started before torch was imported (kgen.search.driver_lane.early_sandboxes)."""
    if not isinstance(db, Database):
        from kgen.search import driver_lane

        # the driver lane's sandboxes, started by `kgen search` before it imported torch, else now
        spares = lane_spares
        if spares is None and config is not None and resume_run_id is None and cluster is None and not ray_address:
            spares = driver_lane.early_sandboxes(config.sandbox, config.proposer)
        try:
            if resume_run_id is None:
                _check(config)
            database = open_db(db, create=resume_run_id is None)
            try:
                return run_search(database, config, resume_run_id=resume_run_id, ray_address=ray_address,
                                  progress=progress, cluster=cluster, lane_spares=spares)
            finally:
                database.close()
        finally:
            if spares is not None:  # the lane's, or nobody's (no GPU after all): stopped either way
                spares.close()

    from kgen.search import cluster as ray_cluster

    run_id = None
    if resume_run_id is not None:
        config, run = load_run(db, resume_run_id)
        run_id = run.id
    problem = _check(config)
    if resume_run_id is not None and problem.source_hash != run.problem_hash:
        raise KgenError(f"the problem file {problem.path} changed since run {run_id} started; start a new run")
    proposer = make_proposer(config, problem)
    progress = progress or SearchProgress()
    owned = cluster is None  # a cluster this search starts or joins, and shuts down (else the caller's)
    search = Search(db, config, problem, proposer, progress, run_id=run_id)
    try:
        if owned:
            progress.note(f"joining the Ray cluster at {ray_address} ..." if ray_address else
                          "starting a local Ray cluster and its workers (takes about 5-10 s) ...")
            if not ray_address:  # the roofline and (its evaluators use this machine's GPU) its facts, meanwhile
                search.prepare_beside_cluster_start()
                if resume_run_id is None:  # and the first candidate judged here (kgen.search.driver_lane)
                    search.begin_beside_cluster_start(lane_spares)
            cluster = ray_cluster.connect(ray_address)
            search.startup["ray_start_s"] = round(time.monotonic() - search.started, 3)
        return search.run(cluster)
    except BaseException as e:
        search.settle_background()  # the run may be opening beside the cluster's start
        if search.run_id is not None:
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "failed"
            try:
                queries.set_run_status(search.db, search.run_id, status)
            except DatabaseUnavailableError:
                pass  # the DB takes no writes now (a full disk): the run stays `running`, which resumes the same
            if isinstance(e, KeyboardInterrupt):
                resume = fmt.command("search", "--resume", search.run_id, db=db_option(db.url))
                progress.note(f"interrupted: run {search.run_id} marked interrupted; `{resume}` continues it")
            if isinstance(e, DatabaseUnavailableError):
                raise DatabaseUnavailableError(f"{e}; run {search.run_id} stopped, and `kgen search --resume "
                                               f"{search.run_id}` continues it once the DB can be used again") from e
        raise
    finally:
        search.settle_background()
        progress.close()
        if owned:
            ray_cluster.shutdown()
