"""benchmarks/real_model/harness.py file to file (issue 32): round 1's prompt file out, a reply file
in, served verbatim by the loopback server on 127.0.0.1 to a real search (real Ray, real SQLite, the
candidate run in Triton's interpreter); round 2's prompt built from round 1's result; the results DB
replayed by `--proposer replay` (its proposals: re-evaluating them is what any search does)."""

from __future__ import annotations

import json
import sys

import pytest

from kgen.core.errors import KgenError
from kgen.store.db import Candidate, open_db

from conftest import REPO

sys.path.insert(0, str(REPO / "benchmarks" / "real_model"))
import harness
from file_server import FileReplyServer

SOFTMAX = REPO / "benchmarks/real_model/problems/23_Softmax.py"
REPLY = '''Idea: one program per row, the whole row in registers.

```python
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.empty_like(x)
        softmax_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
        return y
```
'''


def test_the_file_server_serves_each_prompts_own_reply_and_reports_drift():
    import openai

    a = [{"role": "user", "content": "prompt A"}]
    b = [{"role": "user", "content": "prompt B"}]
    with FileReplyServer([(a, "reply A"), (b, "reply B")], "m") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0)
        assert [m.id for m in client.models.list().data] == ["m"]
        assert client.chat.completions.create(model="m", messages=b).choices[0].message.content == "reply B"
        drifted = [{"role": "user", "content": "prompt A, edited"}]
        assert client.chat.completions.create(model="m", messages=drifted).choices[0].message.content == "reply A"
    assert [s["matched"] for s in server.served] == [True, False]
    assert server.drifted[0]["messages"] == drifted


@pytest.mark.slow
def test_a_round_trip_file_to_file_then_replay(tmp_path):
    from kgen.search import cluster as ray_cluster

    work = tmp_path / "rm"
    [prompt_file] = harness.render(work, 1, [str(SOFTMAX)], "small", "triton", 1, 120.0)
    assert prompt_file == work / "round1/23_Softmax.prompt.md"
    text = prompt_file.read_text()
    assert "# system message" in text and "# user message" in text and "## The problem: 23_Softmax" in text
    assert "23_Softmax.reply.md" in text
    sent = json.loads((work / "round1/23_Softmax.prompt.json").read_text())["messages"]
    for message in sent:  # the prompt file holds the chat verbatim
        assert message["content"].rstrip() in text
    with pytest.raises(KgenError, match="render round 1 first"):
        harness.load_settings(tmp_path / "elsewhere")
    cluster = ray_cluster.connect(None)
    try:
        assert harness.run_round(work, 1, cluster=cluster) == {
            "23_Softmax": "skipped: a prompt or reply file is missing"}
        (work / "round1/23_Softmax.reply.md").write_text(REPLY)
        status = harness.run_round(work, 1, cluster=cluster)
        assert status["23_Softmax"].endswith("1 request(s) served, each matching its rendered prompt")
        db = open_db(str(work / "results.db"))
        try:
            with db.reader() as s:
                [candidate] = s.query(Candidate).all()
                assert candidate.llm_call.prompt == sent and candidate.llm_call.response == REPLY
                assert candidate.evaluations[-1].outcome == "correct", candidate.evaluations[-1].message
        finally:
            db.close()
        table = harness.round_table(work)
        assert "| 1 | 1 | 1 | 1 | 1 | 0 | 0 | - | - | 0 |" in table

        [second] = harness.render(work, 2, None, "small", "triton", 1, 120.0)
        assert "### Candidate #1 (triton): correct, not timed" in second.read_text()
        assert harness.run_round(work, 3, cluster=cluster) == {"23_Softmax": "skipped: its run has done 1 round(s)"}

        # the DB replays: the same reply, prompt and source, with no model
        from kgen.problems.problem import load_problem
        from kgen.proposers import make_proposer
        from kgen.store.history import History

        problem = load_problem(str(work / "problems/23_Softmax.py"), "small")
        replay = make_proposer("replay", problem=problem, replay_db=str(work / "results.db"))
        [proposal] = replay.propose(problem, History(), 1, 0)
        assert proposal.response == REPLY and proposal.prompt == sent and "def softmax_rows" in proposal.source
    finally:
        ray_cluster.shutdown()


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert harness.main(["render", "--round", "2", "--work", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("harness: error: ") and "render round 1 first" in err and len(err.splitlines()) == 1
    assert harness.main(["run", "--round", "0", "--work", str(tmp_path)]) == 2


def test_the_work_folder_moves_and_a_call_at_a_time_keeps_its_prompts_and_time_box(tmp_path):
    """gpu_round.sh's steps without a search: harness.json keeps paths inside the folder relative (a device
    call runs it under another root), `keep` leaves a prompt a model may be answering, `pending` lists what
    waits for a reply, and a spent time box defers every problem instead of starting it."""
    import shutil
    import time

    work = tmp_path / "a" / "rm"
    [prompt] = harness.render(work, 1, [str(SOFTMAX)], "small", "triton", 1, 90.0)
    state = json.loads((work / "harness.json").read_text())
    assert state["problems"] == {"23_Softmax": "problems/23_Softmax.py"} and state["prompts_dir"] == "prompts"
    moved = tmp_path / "b" / "rm"
    shutil.copytree(work, moved)
    shutil.rmtree(work)
    settings = harness.load_settings(moved)
    assert settings.problems["23_Softmax"] == str((moved / "problems/23_Softmax.py").resolve())
    assert settings.prompts_dir == str((moved / "prompts").resolve()) and settings.timeout_s == 90.0

    prompt = moved / "round1/23_Softmax.prompt.md"
    assert harness.pending_prompts(moved) == [prompt]
    prompt.write_text("the prompt the model is answering")
    assert harness.render(moved, 1, None, "small", "triton", 1, 90.0, keep=True) == []  # settings kept, prompt kept
    assert prompt.read_text() == "the prompt the model is answering"
    assert harness.render(moved, 1, None, "small", "triton", 1, 90.0) == [prompt]
    assert "## The problem: 23_Softmax" in prompt.read_text()

    (moved / "round1/23_Softmax.reply.md").write_text(REPLY)
    assert harness.pending_prompts(moved) == [] and harness._ready(moved, 1) == ["23_Softmax"]
    cluster = object()  # a spent time box starts no search: the cluster is never used
    assert harness.run_round(moved, 1, cluster=cluster, deadline=time.time() + 30, reserve_s=60)["23_Softmax"] \
        .startswith("deferred: ")
    status = harness.advance(moved, 3, deadline=time.time() - 1, reserve_s=0, cluster=cluster)
    assert list(status) == [1] and status[1]["23_Softmax"].startswith("deferred: ")
    assert not list(moved.glob("round2/*.prompt.*"))  # nothing ran, so there is no round 2 to render
    assert harness.main(["advance", "--work", str(moved), "--up-to", "0"]) == 2


def test_baselines_are_timed_on_a_gpu_only_and_not_after_the_deadline(tmp_path, monkeypatch):
    import time

    import torch

    import kgen.store.baselines as store_baselines

    work = tmp_path / "rm"
    harness.render(work, 1, [str(SOFTMAX)], "small", "triton", 1, 90.0)
    settings = harness.load_settings(work)
    assert harness.time_baselines(work, settings) == {"23_Softmax": "no GPU: no baselines"}
    asked = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(store_baselines, "get_baselines",
                        lambda db, problem, device, max_autotune: asked.append((problem.name, device, max_autotune))
                        or (1.5, 1.25, None))
    assert harness.time_baselines(work, settings, deadline=time.time() - 1) == {
        "23_Softmax": "not timed (time box): the search times them"}
    assert asked == []
    assert harness.time_baselines(work, settings)["23_Softmax"].startswith("eager 1.5 ms, torch.compile 1.25 ms")
    assert asked == [("23_Softmax", "cuda", False)]


def test_render_states_each_runs_stored_machine_and_refuses_to_guess(tmp_path, capsys):
    """Round 1 on a fresh folder states this machine (its searches evaluate here) and keeps it in facts.json;
    a later round states the machine stored with the problem's run, wherever it is rendered; a run that stores
    none takes the folder's facts.json, which `facts` writes from a prompt rendered there (exactly the machine
    that prompt states); without either, one clear line instead of this machine's facts."""
    from dataclasses import asdict

    from kgen.judge.evaluate import _versions
    from kgen.problems.problem import load_problem
    from kgen.proposers.prompts import PromptRenderer, prompt_context
    from kgen.store.history import History
    from kgen.store.queries import create_run, set_run_evaluator, set_run_status

    from evaluators import H100, H100_LINES

    work = tmp_path / "rm"
    [first] = harness.render(work, 1, [str(SOFTMAX)], "small", "triton", 1, 90.0)
    here = json.loads((work / harness.FACTS).read_text())
    assert here["versions"] == _versions() and f"torch {_versions()['torch_version']}," in first.read_text()

    db = open_db(str(work / "results.db"))
    settings = harness.load_settings(work)
    problem = load_problem(settings.problems["23_Softmax"], "small")
    run_id = create_run(db, problem=problem.name, problem_path=str(problem.path), problem_hash=problem.source_hash,
                        size="small", proposer="openai", model=harness.FILE_MODEL, language="triton", seed=0, rounds=1,
                        candidates_per_round=1, settings={}, device=H100.device)
    set_run_status(db, run_id, "interrupted", rounds_done=1)
    settings.runs = {"23_Softmax": run_id}
    harness.save_settings(work, settings)

    (work / harness.FACTS).unlink()  # a folder from before facts were stored: its run has none either
    assert harness.main(["render", "--round", "2", "--work", str(work)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and f"run {run_id} (23_Softmax) stores no facts" in err
    assert "harness.py facts --work" in err and not (work / "round2/23_Softmax.prompt.md").exists()

    # its facts, from a system prompt rendered on the H100 and the ceilings measured there
    prompt = tmp_path / "h100.prompt.md"
    prompt.write_text("# system message\n\n" + PromptRenderer().render(
        "system.j2", prompt_context(problem, History(evaluator=H100), "any")))
    (work / harness.CEILINGS).write_text(json.dumps({f"{H100.device}|2.11.0+cu130": asdict(H100.ceilings)}))
    assert harness.main(["facts", "--work", str(work), "--from-prompt", str(prompt)]) == 0
    assert json.loads((work / harness.FACTS).read_text()) == H100.to_json()
    [second] = harness.render(work, 2, None, "small", "triton", 1, 90.0)
    text = second.read_text()
    assert all(line in text for line in H100_LINES) and "as contiguous tensors on the GPU" in text
    assert f"torch {_versions()['torch_version']}," not in text

    # the run's own stored machine comes before the folder's
    (work / harness.FACTS).write_text(json.dumps(here))
    set_run_evaluator(db, run_id, H100)
    [second] = harness.render(work, 2, None, "small", "triton", 1, 90.0)
    assert all(line in second.read_text() for line in H100_LINES)
    db.close()

    faster = {f"{H100.device}|2.11.0+cu130": dict(asdict(H100.ceilings), bandwidth_bytes_per_s=3.3e12)}
    (work / harness.CEILINGS).write_text(json.dumps(faster))
    assert harness.main(["facts", "--work", str(work), "--from-prompt", str(prompt)]) == 2
    assert "ceilings given (3300 GB/s) are not the ones the prompt shows (3004 GB/s)" in capsys.readouterr().err
