"""A real model on kgen's real prompts, problems × rounds (issue 32). See README.md in this folder.

    harness.py render --round 1 --work DIR [--problems FILE|DIR ...] [--size small] [--language triton]
    (the model reads DIR/round1/<problem>.prompt.md and writes DIR/round1/<problem>.reply.md)
    harness.py run --round 1 --work DIR          # serves the replies verbatim, evaluates, stores
    harness.py render --round 2 --work DIR       # round 2's prompts, from round 1's results
    ...
    harness.py run --round R --work DIR --base-url URL --model M   # a reachable endpoint instead of files
    harness.py table --work DIR                  # per round: parsed, compiled, correct, every failure's reason
    harness.py advance --work DIR --up-to R      # a call at a time (gpu_round.sh): every round <= R whose replies
                                                 # are there, then each problem's next prompt; --deadline time-boxes
    harness.py pending --work DIR                # the prompt files still waiting for a reply
    harness.py facts --work DIR --from-prompt DIR/round1/P.prompt.md   # the evaluating machine, for runs from
                                                 # before kgen stored it (see evaluating_machine)

Everything lives in DIR: harness.json (the settings and each problem's run id), results.db (kgen's
results DB: `kgen search --proposer replay --from DIR/results.db` re-runs the replies), facts.json
(the machine that evaluates, which the prompts state, wherever they are rendered), and round<R>/ with
the prompt, reply and summary files. A prompt file holds the chat exactly as the
search will send it (kgen's openai proposer renders it: OpenAIProposer.round_jobs); `run` checks that
every request the search sent was one the model read.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from file_server import FileReplyServer  # noqa: E402

from kgen.core.errors import KgenError  # noqa: E402

FILE_MODEL = "file-model"  # the model name the loopback server offers in file mode
STATE = "harness.json"
FACTS = "facts.json"  # the machine the folder's searches evaluate on, for prompts whose run stores none
CEILINGS = "ceilings.json"  # that GPU's measured ceilings (gpu_round.sh keeps kgen's cache here)
PASSED = ("correct", "suspicious")
# outcomes of a candidate whose kernels were built and called (its failure, if any, came later)
COMPILED = ("runtime_error", "timeout", "incorrect", "correct", "suspicious")


@dataclass
class Settings:
    """The harness's settings for a work folder, fixed by round 1's render."""

    problems: dict[str, str]  # name -> problem file
    size: str = "small"
    language: str = "triton"
    candidates: int = 1
    timeout_s: float = 300.0
    prompts_dir: Optional[str] = None  # the templates, copied at round 1 so every round uses the same
    runs: Optional[dict[str, int]] = None  # name -> kgen run id, once round 1 ran


def _inside(work: Path, path: str) -> str:
    """`path` as harness.json keeps it: relative to the work folder when inside it, so the folder can move
    (a device call runs it under another repository root)."""
    try:
        return Path(path).resolve().relative_to(work.resolve()).as_posix()
    except ValueError:
        return path


def _located(work: Path, path: str) -> str:
    return path if Path(path).is_absolute() else str((work / path).resolve())


def load_settings(work: Path) -> Settings:
    path = work / STATE
    if not path.is_file():
        raise KgenError(f"{work} has no {STATE}: render round 1 first")
    settings = Settings(**json.loads(path.read_text()))
    settings.problems = {name: _located(work, p) for name, p in settings.problems.items()}
    if settings.prompts_dir is not None:
        settings.prompts_dir = _located(work, settings.prompts_dir)
    return settings


def save_settings(work: Path, settings: Settings) -> None:
    state = dict(settings.__dict__, problems={name: _inside(work, p) for name, p in settings.problems.items()},
                 prompts_dir=None if settings.prompts_dir is None else _inside(work, settings.prompts_dir))
    (work / STATE).write_text(json.dumps(state, indent=1) + "\n")


def problem_files(paths: list[str], work: Path) -> dict[str, str]:
    """The problems, copied into WORK/problems (the folder holds everything its runs need)."""
    from kgen.problems.problem import load_problem

    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.py")) if p.is_dir() else [p]
    if not files:
        raise KgenError("no problem files given")
    (work / "problems").mkdir(exist_ok=True)
    out = {}
    for f in files:
        if not f.is_file():
            raise KgenError(f"problem file not found: {f}")
        copy = work / "problems" / f.name
        shutil.copyfile(f, copy)
        out[load_problem(str(copy), "full").name] = str(copy.resolve())
    return out


def freeze_prompts(work: Path) -> str:
    """The templates as they are now, copied into WORK/prompts: a later edit of kgen's templates does
    not change the prompts of a measurement under way."""
    from kgen.proposers.prompts import TEMPLATES, bundled_prompts_dir

    folder = work / "prompts"
    folder.mkdir(exist_ok=True)
    for name in TEMPLATES:
        shutil.copyfile(bundled_prompts_dir() / name, folder / name)
    return str(folder.resolve())


def stems(problem: str, n: int) -> list[str]:
    """File stems of a problem's requests in a round: `<problem>` alone, `<problem>.<k>` for several."""
    return [problem] if n == 1 else [f"{problem}.{k + 1}" for k in range(n)]


def round_dir(work: Path, round_no: int) -> Path:
    return work / f"round{round_no}"


def evaluating_machine(work: Path, db, settings: Settings, name: str):
    """The machine whose facts (versions, GPU, ceilings: kgen.judge.evaluator_facts) `name`'s prompts state:
    the one stored with its run (the search stores its evaluator's); for a problem whose run has none (no run
    yet, or one from before kgen stored them) the work folder's FACTS; on a fresh folder (no run at all) this
    machine, kept in FACTS (the harness's searches evaluate on this machine's local cluster). Otherwise one
    clear KgenError: this machine's facts would be the wrong ones."""
    from kgen.judge.evaluator_facts import EvaluatorFacts, this_machine
    from kgen.store.queries import run_evaluator

    run_id = (settings.runs or {}).get(name)
    stored = run_evaluator(db, run_id) if run_id is not None else None
    if stored is not None:
        return stored
    path = work / FACTS
    if path.is_file():
        try:
            return EvaluatorFacts.from_json(json.loads(path.read_text()))
        except ValueError as e:
            raise KgenError(f"{path}: not JSON ({e})") from e
    if settings.runs:
        prompt = round_dir(work, 1) / f"{stems(name, settings.candidates)[0]}.prompt.md"
        raise KgenError(f"{'run ' + str(run_id) if run_id else 'the folder'} ({name}) stores no facts of the machine "
                        f"that evaluates it and {work} has no {FACTS}: take them from a prompt rendered there "
                        f"(harness.py facts --work {work} --from-prompt {prompt})")
    facts = this_machine()
    path.write_text(json.dumps(facts.to_json(), indent=1) + "\n")
    print(f"the prompts state this machine ({facts.device}, torch {facts.versions['torch_version']}): kept in {path}")
    return facts


def facts_from_prompt(text: str, ceilings: dict):
    """The evaluating machine as a rendered system prompt states it (system.j2's "Versions:" and "The GPU:"
    lines), with the GPU's exact ceilings from `ceilings` (a kgen ceilings.json, keyed "<GPU>|<torch>"), which
    must be the ones the prompt shows. For a work folder whose runs predate stored facts."""
    import re

    from kgen.judge.evaluator_facts import EvaluatorFacts
    from kgen.problems.roofline import Ceilings

    found = re.search(r"^- Versions: torch (\S+), Triton (.+?), CUDA (.+?)\.$", text, re.M)
    if found is None:
        raise KgenError("the prompt has no \"- Versions:\" line (is it a system prompt kgen rendered?)")
    torch_version, triton_version, cuda_version = found.groups()
    versions = {"torch_version": torch_version, "triton_version": None if triton_version == "not installed"
                else triton_version, "cuda_version": None if cuda_version.startswith("none") else cuda_version}
    gpu = re.search(r"^- The GPU: (.+?), compute capability (\S+), (\d+) SMs, (\d+) KiB shared memory per block "
                    r"\(opt-in maximum\), (\d+) KiB per SM, (\S+) registers per SM, ([\d.]+) MiB L2, (\d+) GiB "
                    r"memory; measured (\d+) GB/s", text, re.M)
    if gpu is None:
        return EvaluatorFacts(device="cpu", versions=versions)
    name, capability, sms, smem_block, smem_sm, registers, l2, memory, bandwidth = gpu.groups()
    measured = ceilings.get(f"{name}|{torch_version}")
    if not isinstance(measured, dict):
        raise KgenError(f"no ceilings of {name} with torch {torch_version} given (keys: {', '.join(ceilings)})")
    shown = f"{measured['bandwidth_bytes_per_s'] / 1e9:.0f}"
    if shown != bandwidth:
        raise KgenError(f"the ceilings given ({shown} GB/s) are not the ones the prompt shows ({bandwidth} GB/s)")
    return EvaluatorFacts(
        device=name, versions=versions, ceilings=Ceilings(**measured),
        device_properties={"name": name, "compute_capability": capability, "sm_count": int(sms),
                           "shared_memory_per_block_kib": int(smem_block), "shared_memory_per_sm_kib": int(smem_sm),
                           "registers_per_sm": None if registers == "None" else int(registers),
                           "l2_cache_mib": float(l2), "memory_gib": int(memory)})


def import_facts(work: Path, prompt: Path, ceilings: Optional[Path] = None):
    """Write the work folder's FACTS from a system prompt rendered on its evaluating machine (and the ceilings
    measured there, CEILINGS by default); returns them."""
    ceilings = ceilings or work / CEILINGS
    for path in (prompt, ceilings):
        if not path.is_file():
            raise KgenError(f"file not found: {path}")
    text = prompt.read_text()
    try:
        measured = json.loads(ceilings.read_text())
    except ValueError as e:
        raise KgenError(f"{ceilings}: not JSON ({e})") from e
    facts = facts_from_prompt(text, measured)
    (work / FACTS).write_text(json.dumps(facts.to_json(), indent=1) + "\n")
    return facts


def open_results(work: Path):
    from kgen.store.db import open_db

    return open_db(str(work / "results.db"))


def rounds_done(db, run_id: Optional[int]) -> int:
    from kgen.store.queries import get_run

    return 0 if run_id is None else get_run(db, run_id).rounds_done


def prompt_text(problem: str, round_no: int, job: Any, reply: str) -> str:
    """The prompt file: the chat's messages in order, under one heading each, nothing else of kgen's."""
    parts = [f"<!-- kgen prompt: problem {problem}, round {round_no}, {job.template} request. "
             f"Your reply, the assistant's message, goes to {reply}. -->"]
    for m in job.messages:
        parts.append(f"# {m['role']} message\n\n{m['content'].rstrip()}\n")
    return "\n\n".join(parts) + "\n"


def time_baselines(work: Path, settings: Settings, deadline: Optional[float] = None,
                   workers: int = 4) -> dict[str, str]:
    """Each problem's baselines (eager, torch.compile) on this machine's GPU, timed now unless the results DB
    has them, and kept there: the prompts show them, and the searches read them instead of timing them.
    Nothing on a machine without a GPU. Several problems compile at once (their timed runs take turns on
    the GPU's timing lock); none starts after `deadline` (time.time()): the search times those itself."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import torch

    from kgen.problems.problem import load_problem
    from kgen.store.baselines import get_baselines

    if not torch.cuda.is_available():
        print("baselines: no GPU here, none timed (a search without a GPU claims no times)")
        return dict.fromkeys(settings.problems, "no GPU: no baselines")
    db = open_results(work)
    out: dict[str, str] = {}
    lock = threading.Lock()

    def one(name: str, path: str) -> None:
        if deadline is not None and time.time() > deadline:
            what = "not timed (time box): the search times them"
        else:
            started = time.monotonic()
            try:
                got = get_baselines(db, load_problem(path, settings.size), "cuda", max_autotune=False)
                what = (f"eager {got[0]} ms, torch.compile {got[1]} ms ({time.monotonic() - started:.0f} s)"
                        if got else "could not be timed")
            except Exception as e:  # noqa: BLE001 - one problem's baselines must not stop the others'
                what = f"failed: {type(e).__name__}: {e}"
        with lock:
            out[name] = what
            print(f"baselines {name}: {what}", flush=True)

    try:
        with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
            for future in [pool.submit(one, name, path) for name, path in settings.problems.items()]:
                future.result()
    finally:
        db.close()
    return out


def render(work: Path, round_no: int, paths: Optional[list[str]], size: str, language: str, candidates: int,
           timeout_s: float, force: bool = False, baselines: bool = False, keep: bool = False,
           deadline: Optional[float] = None) -> list[Path]:
    """Write round `round_no`'s prompt files; returns them. `baselines`: time the problems' baselines
    first (time_baselines), so the prompts show them. `keep`: a problem whose prompt files are there
    already keeps them (a model may be answering them)."""
    from kgen.problems.problem import load_problem
    from kgen.proposers.openai_proposer import OpenAIProposer
    from kgen.proposers.prompts import PromptRenderer
    from kgen.store.history import build_history

    work.mkdir(parents=True, exist_ok=True)
    if round_no == 1 and (work / STATE).is_file() and not force and load_settings(work).runs:
        raise KgenError(f"{work} already ran round 1: render a later round, or use a new folder")
    if round_no == 1 and not (paths is None and (work / STATE).is_file() and not force):
        settings = Settings(problems=problem_files(paths or [str(HERE / "problems")], work), size=size,
                            language=language, candidates=candidates, timeout_s=timeout_s,
                            prompts_dir=freeze_prompts(work))
        save_settings(work, settings)
    else:
        settings = load_settings(work)
    if baselines:
        time_baselines(work, settings, deadline)
    out = round_dir(work, round_no)
    out.mkdir(exist_ok=True)
    db = open_results(work)
    written = []
    try:
        for name, path in settings.problems.items():
            run_id = (settings.runs or {}).get(name)
            done = rounds_done(db, run_id)
            if done != round_no - 1:
                print(f"{name}: skipped (its run has done {done} round(s); round {round_no} needs {round_no - 1})")
                continue
            if keep and all((out / f"{stem}.prompt.json").is_file() for stem in stems(name, settings.candidates)):
                print(f"{name}: round {round_no}'s prompt kept (rendered before)")
                continue
            problem = load_problem(path, settings.size)
            history = build_history(db, problem, run_id=run_id,
                                    evaluator=evaluating_machine(work, db, settings, name))
            if history.timeout_s is None:  # round 1 has no run yet: its run will judge with the harness's limit
                history.timeout_s = settings.timeout_s
            proposer = OpenAIProposer(problem=problem, model=FILE_MODEL, base_url="http://127.0.0.1:9/v1",
                                      api_key="unused", language=settings.language,
                                      renderer=PromptRenderer(settings.prompts_dir))
            jobs = proposer.round_jobs(problem, history, settings.candidates, round_no - 1)
            for stem, job in zip(stems(name, settings.candidates), jobs):
                reply = f"{stem}.reply.md"
                (out / f"{stem}.prompt.md").write_text(prompt_text(name, round_no, job, reply))
                (out / f"{stem}.prompt.json").write_text(json.dumps(
                    {"problem": name, "round": round_no, "template": job.template, "origin": job.origin,
                     "messages": job.messages}, indent=1, ensure_ascii=False) + "\n")
                written.append(out / f"{stem}.prompt.md")
    finally:
        db.close()
    return written


def _extend_run(db, run_id: int, rounds: int, base_url: str, model: str, settings: Settings, name: str) -> None:
    """Let a run go on for one more round, from a server on a new port: the run's stored settings are
    what `--resume` reads (the problem file and the templates where the work folder is now)."""
    from kgen.store.db import Run

    with db.session() as s:
        run = s.get(Run, run_id)
        run.settings = dict(run.settings or {}, rounds=rounds, base_url=base_url, model=model,
                            problem=settings.problems[name], prompts_dir=settings.prompts_dir)
        run.rounds_planned = rounds
        run.status = "interrupted"


def _search_config(settings: Settings, path: str, round_no: int, base_url: str, model: str,
                   api_key_env: str, retries: int):
    from kgen.search.loop import SearchConfig

    return SearchConfig(problem=path, rounds=round_no, candidates=settings.candidates, proposer="openai",
                        language=settings.language, size=settings.size, timeout_s=settings.timeout_s, model=model,
                        base_url=base_url, api_key_env=api_key_env, overlap=False, prompts_dir=settings.prompts_dir,
                        proposer_options={"max_retries": retries})


def _search_round(db, settings: Settings, name: str, round_no: int, base_url: str, model: str, cluster,
                  api_key_env: str = "OPENAI_API_KEY", retries: int = 1) -> int:
    from kgen.search.loop import run_search

    path = settings.problems[name]
    run_id = (settings.runs or {}).get(name)
    if run_id is None:
        summary = run_search(db, _search_config(settings, path, round_no, base_url, model, api_key_env, retries),
                             cluster=cluster)
        return summary.run_id
    _extend_run(db, run_id, round_no, base_url, model, settings, name)
    run_search(db, resume_run_id=run_id, cluster=cluster)
    return run_id


def run_round(work: Path, round_no: int, base_url: Optional[str] = None, model: Optional[str] = None,
              api_key_env: str = "OPENAI_API_KEY", cluster=None, deadline: Optional[float] = None,
              reserve_s: float = 0.0) -> dict[str, str]:
    """Evaluate round `round_no` for every problem ready for it; returns problem -> what happened.
    File mode (no base_url): each problem's reply files are served verbatim on 127.0.0.1. The time box:
    no problem starts with less than `reserve_s` seconds left before `deadline` (time.time()); those stay
    a round behind, and the same call later evaluates them."""
    import time

    from kgen.search import cluster as ray_cluster

    settings = load_settings(work)
    folder = round_dir(work, round_no)
    folder.mkdir(exist_ok=True)
    db = open_results(work)
    own_cluster = cluster is None
    status: dict[str, str] = {}
    try:
        cluster = cluster or ray_cluster.connect(None)
        for name in settings.problems:
            run_id = (settings.runs or {}).get(name)
            done = rounds_done(db, run_id)
            if done != round_no - 1:
                status[name] = f"skipped: its run has done {done} round(s)"
                continue
            if name in os.environ.get("RM_SKIP", "").split():  # e.g. a problem longer than one device call
                status[name] = "skipped: named in RM_SKIP"
                continue
            if deadline is not None and deadline - time.time() < reserve_s:
                status[name] = (f"deferred: {max(deadline - time.time(), 0):.0f} s left of the time box, "
                                f"{reserve_s:.0f} s needed to start a problem")
                continue
            started = time.monotonic()
            try:
                run_id, status[name] = _problem_round(db, settings, name, round_no, folder, base_url, model,
                                                      api_key_env, cluster)
            except KgenError as e:  # one problem's failure must not stop the others; its run resumes later
                status[name] = f"failed: {e}"
                run_id = run_id if run_id is not None else _latest_run(db, name)
                if run_id is None:
                    continue
            except KeyboardInterrupt:  # stopped mid-round: keep the run's id, so the next call resumes that run
                run_id = run_id if run_id is not None else _latest_run(db, name)
                if run_id is not None:
                    settings.runs = dict(settings.runs or {}, **{name: run_id})
                    save_settings(work, settings)
                raise
            if run_id is not None:  # a search ran: how long it took, as it ends (the time box's evidence)
                print(f"round {round_no}, {name}: {status[name]} ({time.monotonic() - started:.0f} s)", flush=True)
            if run_id is None:
                continue
            settings.runs = dict(settings.runs or {}, **{name: run_id})
            save_settings(work, settings)
    finally:
        db.close()
        if own_cluster and cluster is not None:
            ray_cluster.shutdown()
    (folder / "summary.md").write_text(round_table(work, round_no) + "\n")
    return status


def _problem_round(db, settings: Settings, name: str, round_no: int, folder: Path, base_url: Optional[str],
                   model: Optional[str], api_key_env: str, cluster) -> tuple[Optional[int], str]:
    """One problem's round: (its run id, None if nothing ran; what happened)."""
    if base_url is not None:
        run_id = _search_round(db, settings, name, round_no, base_url, model or "", cluster, api_key_env, retries=5)
        _dump_calls(db, run_id, name, round_no, folder)
        return run_id, f"run {run_id}: served by {base_url}"
    replies = []
    for stem in stems(name, settings.candidates):
        prompt, reply = folder / f"{stem}.prompt.json", folder / f"{stem}.reply.md"
        if not prompt.is_file() or not reply.is_file():
            return None, "skipped: a prompt or reply file is missing"
        replies.append((json.loads(prompt.read_text())["messages"], reply.read_text()))
    with FileReplyServer(replies, FILE_MODEL) as server:
        run_id = _search_round(db, settings, name, round_no, server.base_url, FILE_MODEL, cluster)
    drift = server.drifted
    if drift:
        (folder / f"{name}.drift.json").write_text(json.dumps(drift, indent=1, ensure_ascii=False))
    return run_id, (f"run {run_id}: {len(server.served)} request(s) served"
                    + (f"; {len(drift)} did NOT match a rendered prompt (see {name}.drift.json)"
                       if drift else ", each matching its rendered prompt"))


def _latest_run(db, name: str) -> Optional[int]:
    """The newest run of a problem: the one a failed search had created before it failed."""
    from sqlalchemy import select

    from kgen.store.db import Run

    with db.reader() as s:
        return s.scalars(select(Run.id).where(Run.problem == name).order_by(Run.id.desc())).first()


def _dump_calls(db, run_id: int, name: str, round_no: int, folder: Path) -> None:
    """Endpoint mode: the prompts sent and the replies received, as the files file mode reads."""
    from sqlalchemy import select

    from kgen.store.db import Candidate

    with db.reader() as s:
        calls = [c.llm_call for c in s.scalars(select(Candidate).where(Candidate.run_id == run_id,
                                                                         Candidate.round == round_no)) if c.llm_call]
        for stem, call in zip(stems(name, len(calls)), calls):
            (folder / f"{stem}.prompt.json").write_text(json.dumps(
                {"problem": name, "round": round_no, "template": call.template, "messages": call.prompt},
                indent=1, ensure_ascii=False) + "\n")
            (folder / f"{stem}.reply.md").write_text(call.response or "")


def advance(work: Path, up_to: int, last_round: int = 3, deadline: Optional[float] = None, reserve_s: float = 0.0,
            cluster=None) -> dict[int, dict[str, str]]:
    """One step of a measurement that goes a call at a time: evaluate every round up to `up_to` whose reply
    files are there (a problem the time box left behind catches up first, rounds in order), then render
    each problem's next round up to `last_round`, leaving the prompt files rendered before as they are.
    Returns round -> problem -> what happened (the rounds that evaluated something)."""
    from kgen.search import cluster as ray_cluster

    own_cluster = cluster is None
    done: dict[int, dict[str, str]] = {}
    try:
        cluster = cluster or ray_cluster.connect(None)
        for round_no in range(1, up_to + 1):
            # only where a problem is ready for this round: a round's summary is not rewritten for nothing
            if _ready(work, round_no):
                done[round_no] = run_round(work, round_no, cluster=cluster, deadline=deadline, reserve_s=reserve_s)
    finally:
        if own_cluster:
            ray_cluster.shutdown()
    settings = load_settings(work)
    for round_no in range(2, min(up_to + 1, last_round) + 1):
        render(work, round_no, None, settings.size, settings.language, settings.candidates, settings.timeout_s,
               keep=True)
    return done


def _ready(work: Path, round_no: int) -> list[str]:
    """The problems whose runs wait for round `round_no` and whose reply files for it are there."""
    settings = load_settings(work)
    folder = round_dir(work, round_no)
    db = open_results(work)
    try:
        return [name for name in settings.problems
                if rounds_done(db, (settings.runs or {}).get(name)) == round_no - 1
                and all((folder / f"{stem}.reply.md").is_file() and (folder / f"{stem}.prompt.json").is_file()
                        for stem in stems(name, settings.candidates))]
    finally:
        db.close()


def pending_prompts(work: Path) -> list[Path]:
    """The prompt files a model has yet to answer: each problem's next round, where no reply is there."""
    settings = load_settings(work)
    db = open_results(work)
    try:
        out = []
        for name in settings.problems:
            folder = round_dir(work, rounds_done(db, (settings.runs or {}).get(name)) + 1)
            for stem in stems(name, settings.candidates):
                if (folder / f"{stem}.prompt.md").is_file() and not (folder / f"{stem}.reply.md").is_file():
                    out.append(folder / f"{stem}.prompt.md")
        return out
    finally:
        db.close()


@dataclass
class Row:
    problem: str
    round: int
    outcome: str
    message: str
    speedup_eager: Optional[float]
    speedup_compile: Optional[float]
    template: Optional[str]


def rows(work: Path) -> list[Row]:
    """Every candidate of the harness's runs, with its latest outcome."""
    from sqlalchemy import select
    from sqlalchemy.orm import selectinload

    from kgen.store.db import Candidate, latest_evaluation

    settings = load_settings(work)
    ids = {run_id: name for name, run_id in (settings.runs or {}).items()}
    db = open_results(work)
    out = []
    try:
        with db.reader() as s:
            q = (select(Candidate).where(Candidate.run_id.in_(list(ids)))
                 .options(selectinload(Candidate.evaluations), selectinload(Candidate.llm_call))
                 .order_by(Candidate.round, Candidate.id))
            for c in s.scalars(q):
                ev = latest_evaluation(c)
                out.append(Row(ids[c.run_id], c.round or 0, ev.outcome if ev else "not evaluated",
                               (ev.message or "") if ev else "", ev.speedup_eager if ev else None,
                               ev.speedup_compile if ev else None, c.llm_call.template if c.llm_call else None))
    finally:
        db.close()
    return out


def _geomean(values: list[float]) -> Optional[float]:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def round_table(work: Path, round_no: Optional[int] = None) -> str:
    """Markdown: per round, parsed / compiled / correct / faster than eager and torch.compile, and one
    line per failure with its reason."""
    all_rows = rows(work)
    rounds = sorted({r.round for r in all_rows if round_no is None or r.round == round_no})
    lines = ["| round | problems | parsed | compiled | correct | > eager | > torch.compile | geomean vs eager "
             "(correct) | geomean vs torch.compile (correct) | problems > torch.compile so far |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    failures = []
    for rnd in rounds:
        these = [r for r in all_rows if r.round == rnd]
        correct = [r for r in these if r.outcome in PASSED]
        gm = _geomean([r.speedup_eager for r in correct if r.speedup_eager])
        gm_compile = _geomean([r.speedup_compile for r in correct if r.speedup_compile])
        so_far = {r.problem for r in all_rows
                  if r.round <= rnd and r.outcome in PASSED and (r.speedup_compile or 0) > 1}
        lines.append(f"| {rnd} | {len({r.problem for r in these})} | {sum(r.outcome != 'no_code' for r in these)} | "
                     f"{sum(r.outcome in COMPILED for r in these)} | {len(correct)} | "
                     f"{sum(1 for r in correct if (r.speedup_eager or 0) > 1)} | "
                     f"{sum(1 for r in correct if (r.speedup_compile or 0) > 1)} | "
                     f"{'-' if gm is None else f'{gm:.2f}x'} | {'-' if gm_compile is None else f'{gm_compile:.2f}x'} | "
                     f"{len(so_far)} |")
        for r in these:
            if r.outcome not in PASSED:
                reason = " ".join(r.message.split())[:300]
                failures.append(f"- round {rnd}, {r.problem} ({r.template or '-'}): {r.outcome}: {reason}")
    return "\n".join(lines + (["", *failures] if failures else []))


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_render = sub.add_parser("render", help="write a round's prompt files")
    p_run = sub.add_parser("run", help="evaluate a round: serve the reply files (or ask --base-url), store")
    p_table = sub.add_parser("table", help="print the per-round table and every failure's reason")
    for p in (p_render, p_run, p_table):
        p.add_argument("--work", required=True, type=Path, help="the work folder (outside any git worktree)")
    for p in (p_render, p_run):
        p.add_argument("--round", required=True, type=int, dest="round_no")
    p_render.add_argument("--problems", nargs="*", help="problem files or folders (round 1; default: problems/ here)")
    p_render.add_argument("--size", default="small", choices=["small", "full"])
    p_render.add_argument("--language", default="triton", choices=["triton", "cuda", "any"])
    p_render.add_argument("--candidates", type=int, default=1, help="requests per problem and round")
    p_render.add_argument("--timeout", type=float, default=300.0, dest="timeout_s")
    p_render.add_argument("--force", action="store_true", help="round 1: start the folder's settings again")
    p_render.add_argument("--baselines", action="store_true",
                          help="time each problem's baselines on this GPU first (kept in the DB), so the prompts "
                               "show them")
    p_render.add_argument("--keep", action="store_true",
                          help="leave a problem's prompt files that are there as they are")
    p_advance = sub.add_parser("advance", help="evaluate every round up to --up-to whose replies are there (the time "
                                               "box's leftovers first), then render each problem's next round")
    p_advance.add_argument("--work", required=True, type=Path)
    p_advance.add_argument("--up-to", required=True, type=int, dest="up_to")
    p_advance.add_argument("--last-round", type=int, default=3, help="no prompts are rendered past this round")
    p_facts = sub.add_parser("facts", help=f"write the work folder's {FACTS} (the evaluating machine its prompts "
                                           "state) from a prompt rendered there, for runs that store none")
    p_facts.add_argument("--work", required=True, type=Path)
    p_facts.add_argument("--from-prompt", required=True, type=Path, dest="prompt",
                         help="a system prompt rendered on the evaluating machine (a round<R>/*.prompt.md)")
    p_facts.add_argument("--ceilings", type=Path, help=f"that GPU's ceilings (default: the folder's {CEILINGS})")
    p_pending = sub.add_parser("pending", help="list the prompt files that wait for a reply")
    p_pending.add_argument("--work", required=True, type=Path)
    for p in (p_render, p_run, p_advance):
        p.add_argument("--deadline", type=float, help="the time box's end (seconds since the epoch)")
    for p in (p_run, p_advance):
        p.add_argument("--reserve-s", type=float, default=0.0,
                       help="no problem starts with less than this left before --deadline")
    p_run.add_argument("--base-url", help="an OpenAI-compatible endpoint instead of reply files")
    p_run.add_argument("--model", help="the endpoint's model")
    p_run.add_argument("--api-key-env", default="OPENAI_API_KEY")
    args = parser.parse_args(argv)
    try:
        if args.command in ("render", "run") and args.round_no < 1:
            raise KgenError(f"--round must be at least 1 (got {args.round_no})")
        if args.command == "render":
            files = render(args.work, args.round_no, args.problems, args.size, args.language, args.candidates,
                           args.timeout_s, args.force, args.baselines, args.keep, args.deadline)
            print(f"{len(files)} prompt file(s) in {round_dir(args.work, args.round_no)}; replies go beside them "
                  "as <name>.reply.md")
        elif args.command == "run":
            for name, what in run_round(args.work, args.round_no, args.base_url, args.model,
                                        args.api_key_env, deadline=args.deadline, reserve_s=args.reserve_s).items():
                print(f"{name}: {what}")
            print(round_table(args.work, args.round_no))
        elif args.command == "advance":
            if args.up_to < 1:
                raise KgenError(f"--up-to must be at least 1 (got {args.up_to})")
            for round_no, status in advance(args.work, args.up_to, args.last_round, args.deadline,
                                            args.reserve_s).items():  # each problem's line came as it ran
                for name, what in status.items():
                    if what.startswith(("deferred", "skipped")):
                        print(f"round {round_no}, {name}: {what}")
            print(round_table(args.work))
        elif args.command == "facts":
            facts = import_facts(args.work, args.prompt, args.ceilings)
            print(f"{args.work / FACTS}: {facts.device}, torch {facts.versions['torch_version']}, Triton "
                  f"{facts.versions['triton_version']}, CUDA {facts.versions['cuda_version']}")
        elif args.command == "pending":
            for path in pending_prompts(args.work):
                print(path)
        else:
            print(round_table(args.work))
    except KgenError as e:
        print(f"harness: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
