"""kgen on a Ray cluster: where evaluators go, what happens to the work of a Ray worker or node that
dies, and joining a cluster that authenticates with a token.

Real Ray throughout. The stage tests run kgen's stages on a local cluster with stand-ins for the
evaluation (they die, or fail as kgen's harness would, on cue). The cluster tests start real Ray
nodes on this machine (`ray start --head`, `ray start --address`, each its own raylet, token
authentication on) and run the real CLI against them; the one thing mocked is the GPU: a node
advertises the `kgen_gpu` custom resource instead, and candidates run in Triton's interpreter.
CI runs all of these (the README's test command selects no markers).
"""

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from kgen.core.records import EvalResult
from kgen.search.cluster import EVALUATOR_RESOURCE, evaluator_placement

RAY = str(Path(sys.executable).parent / "ray")


# --- where evaluators go -------------------------------------------------------------------------

def _node(alive=True, **resources) -> dict:
    return {"Alive": alive, "Resources": dict(resources), "NodeID": secrets.token_hex(28),
            "NodeManagerAddress": "127.0.0.1"}


@pytest.mark.parametrize("nodes, count, options", [
    # two evaluators share each GPU (kgen.judge.gpu_lock keeps their timed runs apart), a GPU's CPU split between them
    ([_node(CPU=16, GPU=8), _node(CPU=16, GPU=8)], 32, dict(num_cpus=0.5, num_gpus=0.5)),
    ([_node(CPU=4), _node(CPU=2, kgen_gpu=1)], 1, dict(num_cpus=1, resources={"kgen_gpu": 1})),
    # kgen_gpu on a GPU node keeps kgen to that many of its GPUs; a kgen_gpu without a GPU is no use there
    ([_node(CPU=16, GPU=8, kgen_gpu=2), _node(CPU=4, kgen_gpu=3), _node(CPU=16, GPU=8)], 4,
     dict(num_cpus=0.5, num_gpus=0.5, resources={"kgen_gpu": 0.5})),
    ([_node(CPU=4), _node(CPU=2)], 5, dict(num_cpus=1)),  # no GPU anywhere: CPU evaluators, one CPU left over
    ([_node(CPU=2)], 2, dict(num_cpus=0.5)),  # a 2-core machine: two evaluators share one CPU, one for compiles
    ([_node(CPU=4, GPU=2, alive=False), _node(CPU=2, GPU=1)], 2, dict(num_cpus=0.5, num_gpus=0.5)),
], ids=["two-per-gpu", "kgen_gpu-stand-in", "kgen_gpu-limits-gpus", "cpus-only", "two-cores", "dead-nodes-ignored"])
def test_evaluators_go_to_kgen_gpu_else_gpus_else_cpus(nodes, count, options, big_gpu_here):
    placement = evaluator_placement(nodes)
    assert (placement.count, placement.actor_options) == (count, options)


@pytest.fixture
def big_gpu_here(monkeypatch):
    """This machine's GPU as the default of evaluators per GPU reads it: 80 GiB (there is none here)."""
    from kgen.search import cluster

    monkeypatch.setattr(cluster, "_local_gpu_bytes", lambda: 80 << 30)


def test_two_evaluators_share_a_gpu_by_default_only_where_this_machines_gpu_is_big(monkeypatch):
    from kgen.search import cluster

    nodes = [_node(CPU=16, GPU=1)]
    for here, count in ((80 << 30, 2), (40 << 30, 2), (24 << 30, 1), (0, 1)):  # an H100, 40 GB, 24 GB, no GPU here
        monkeypatch.setattr(cluster, "_local_gpu_bytes", lambda b=here: b)
        assert evaluator_placement(nodes).count == count
    assert evaluator_placement([_node(CPU=4, kgen_gpu=1)]).count == 1  # stand-ins: one each unless set


def test_evaluators_per_gpu_is_a_setting_and_a_bad_one_is_one_line(monkeypatch):
    from kgen.core.errors import KgenError

    nodes = [_node(CPU=16, GPU=8)]
    monkeypatch.setenv("KGEN_EVALUATORS_PER_GPU", "1")  # one per GPU, a whole GPU and CPU each
    placement = evaluator_placement(nodes)
    assert (placement.count, placement.actor_options) == (8, dict(num_cpus=1, num_gpus=1))
    assert placement.described == "1 per GPU"
    monkeypatch.setenv("KGEN_EVALUATORS_PER_GPU", "4")
    assert evaluator_placement(nodes).actor_options == dict(num_cpus=0.25, num_gpus=0.25)
    monkeypatch.setenv("KGEN_EVALUATORS_PER_GPU", "3")  # stand-ins without a GPU follow the setting too
    assert evaluator_placement([_node(CPU=4, kgen_gpu=1)]).count == 3
    monkeypatch.setenv("KGEN_EVALUATORS_PER_GPU", "two")
    with pytest.raises(KgenError, match="KGEN_EVALUATORS_PER_GPU='two'"):
        evaluator_placement(nodes)


def test_the_evaluators_sharing_a_gpu_are_given_the_same_one_by_ray(big_gpu_here):
    """Ray packs each GPU's halves before the next (first fit): the two evaluators of a GPU see the same device.
    Ray's GPUs are declared here, not real (Ray hands out their ids as it would real ones)."""
    import logging

    import ray

    from kgen.search.cluster import Reservation

    saved_env = dict(os.environ)
    ray.init(address="local", num_cpus=3, num_gpus=2, include_dashboard=False, log_to_driver=False,
             logging_level=logging.ERROR)
    try:
        placement = evaluator_placement([{"NodeID": ray.get_runtime_context().get_node_id(), "Alive": True,
                                          "Resources": {"CPU": 3.0, "GPU": 2.0}}])
        reservation = Reservation(placement, wait_s=30)

        @ray.remote
        class Where:
            def gpus(self):
                return ray.get_gpu_ids()

        actors = [Where.options(**reservation.actor_options(i)).remote() for i in range(placement.count)]
        ids = [tuple(ray.get(a.gpus.remote(), timeout=60)) for a in actors]
        assert placement.count == 4 and sorted(ids) == [(0,), (0,), (1,), (1,)]
        reservation.release()
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved_env)


def _slots(placement, nodes) -> tuple[list[dict], dict[int, float]]:
    """(each node's evaluator bundles, by node index; the compile CPUs on each node index)."""
    index = {n["NodeID"]: i for i, n in enumerate(nodes)}
    evaluators: list[dict] = [{} for _ in nodes]
    for slot in placement.evaluators:
        per_node = evaluators[index[slot.node_id]]
        per_node[len(per_node)] = slot.resources
    return evaluators, {index[s.node_id]: s.resources["CPU"] for s in placement.compiles}


@pytest.mark.parametrize("cpus, evaluators, compiles", [
    ([1, 1], [0, 2], {0: 1.0}),  # the hang: two half-CPU evaluators, one on each node, left no whole CPU
    ([1, 2], [1, 1], {1: 1.0}),
    ([3, 1], [2, 1], {0: 1.0}),
    ([2], [2], {0: 1.0}),
    ([1], [1], {0: 0.5}),  # a lone CPU, shared by an evaluator and the compile tasks
], ids=["1+1", "1+2", "3+1", "2", "1"])
def test_cpu_evaluators_always_leave_a_compile_slot(cpus, evaluators, compiles):
    nodes = [_node(CPU=c) for c in cpus]
    placement = evaluator_placement(nodes)
    per_node, compile_cpus = _slots(placement, nodes)
    assert [len(p) for p in per_node] == evaluators and compile_cpus == compiles
    for i, (c, bundles) in enumerate(zip(cpus, per_node)):  # each node holds what it is asked, compile slot included
        assert sum(b["CPU"] for b in bundles.values()) + compile_cpus.get(i, 0) <= c
    assert placement.compile_cpus <= max(compiles.values())


def test_gpu_nodes_short_of_cpus_share_them_with_evaluators_and_compile_tasks(big_gpu_here):
    nodes = [_node(CPU=1, GPU=1)]  # one CPU: the GPU's two evaluators half of it, the compile tasks the other half
    placement = evaluator_placement(nodes)
    assert [s.resources for s in placement.evaluators] == [{"CPU": 0.25, "GPU": 0.5}] * 2
    assert [s.resources for s in placement.compiles] == [{"CPU": 0.5}] and placement.compile_cpus == 0.5
    placement = evaluator_placement(nodes, per_gpu=1)  # one evaluator: half each
    assert [s.resources for s in placement.evaluators] == [{"CPU": 0.5, "GPU": 1}]
    nodes = [_node(CPU=4, GPU=8), _node(CPU=2)]  # sixteen evaluators on four CPUs; the other node compiles
    placement = evaluator_placement(nodes)
    assert placement.count == 16 and {s.resources["CPU"] for s in placement.evaluators} == {0.25}
    assert [(s.node_id, s.resources) for s in placement.compiles] == [(nodes[1]["NodeID"], {"CPU": 2.0})]


def test_a_cluster_without_any_cpu_is_one_line_naming_its_nodes():
    from kgen.core.errors import KgenError

    nodes = [_node(CPU=0, kgen_gpu=1), _node(alive=False, CPU=8)]
    with pytest.raises(KgenError) as caught:
        evaluator_placement(nodes)
    message = str(caught.value)
    assert "\n" not in message and "no CPU" in message and nodes[0]["NodeID"][:8] in message
    assert nodes[1]["NodeID"][:8] not in message  # a dead node is not the cluster's


def test_workers_load_a_bundled_problem_by_name_and_any_other_by_path(tmp_path):
    from kgen.problems.problem import resolve_problem_path
    from kgen.search.workers import problem_ref

    own = tmp_path / "my_problem.py"
    own.write_text("")
    # by name: each node finds its own install's copy, wherever kgen is installed there
    assert problem_ref(str(resolve_problem_path("softmax"))) == "softmax"
    assert problem_ref(str(own)) == str(own.resolve())


def test_a_node_whose_problem_file_differs_from_the_drivers_stops_the_search():
    from kgen.core.errors import KgenError
    from kgen.problems.problem import load_problem
    from kgen.search.workers import _load

    assert _load("softmax", "small", load_problem("softmax", "small").source_hash).name == "softmax"
    with pytest.raises(KgenError, match="differs from the driver's: install the same kgen on every Ray node"):
        _load("softmax", "small", "0123456789abcdef")


# --- the stages when workers die (local Ray, stand-in evaluation) ---------------------------------

def _attempt(plan: dict, stage: str) -> int:
    """Count this attempt of `stage` on the plan's candidate in a file (it outlives the worker) and return it."""
    counter = Path(plan["state"]) / f"{plan['name']}.{stage}"
    n = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(n))
    return n


def _compile_stand_in(problem, size, source_hash, source, settings):
    """The compile stage, as a task whose worker dies (os._exit) the first `compile_deaths` times."""
    import ray

    plan = json.loads(source)
    if _attempt(plan, "compile") <= plan.get("compile_deaths", 0):
        os._exit(1)
    return None, {}, {"node_id": ray.get_runtime_context().get_node_id(), "ip": "127.0.0.1"}


class _EvaluatorStandIn:
    """An evaluator whose worker dies the first `eval_deaths` times, then returns `harness_error` the next
    `harness_errors` times (kgen's fault, as the judge reports it), then `correct`."""

    def __init__(self, problem, size, source_hash):
        pass

    def warm_up(self, sandbox, language):  # its one-time work before any candidate: so many seconds
        time.sleep(1.0)
        self.warmed_at = time.time()
        return 2.5

    def device(self):
        import ray

        from kgen.search.workers import Device

        return Device(name="cpu", cuda_arch=None, node_id=ray.get_runtime_context().get_node_id())

    def evaluate(self, source, settings):
        started = {"started": time.time(), "warmed_at": getattr(self, "warmed_at", None)}
        plan = json.loads(source)
        n = _attempt(plan, "evaluate")
        deaths = plan.get("eval_deaths", 0)
        if n <= deaths:
            os._exit(1)
        if n - deaths <= plan.get("harness_errors", 0):
            return EvalResult(outcome="harness_error", message="the judge lost its runner", size=settings.size)
        return EvalResult(outcome="correct", size=settings.size, details={"when": started})


PLANS = {  # candidate id -> what happens to it
    1: {"name": "plain"},
    2: {"name": "compile-worker-dies-once", "compile_deaths": 1},
    3: {"name": "evaluator-dies-twice", "eval_deaths": 2},
    4: {"name": "evaluator-keeps-dying", "eval_deaths": 99},
    5: {"name": "harness-error-once", "harness_errors": 1},
    6: {"name": "harness-error-always", "harness_errors": 99},
}


@dataclass
class StagesRun:
    events: list
    state: Path
    warm_up_s: list

    def done(self, candidate_id: int) -> EvalResult:
        [result] = [e.result for e in self.events if e.kind == "done" and e.candidate_id == candidate_id]
        return result

    def attempts(self, candidate_id: int, stage: str) -> int:
        return int((self.state / f"{PLANS[candidate_id]['name']}.{stage}").read_text())


@pytest.fixture(scope="module")
def stages_run(tmp_path_factory) -> StagesRun:
    """Every plan through kgen's stages at once, on a local Ray cluster with one evaluator."""
    import logging

    import ray
    from ray import cloudpickle

    from kgen.core.records import EvalSettings
    from kgen.search.cluster import Cluster, Placement
    from kgen.search.workers import Job, Stages

    class StandInStages(Stages):
        compile_function = staticmethod(_compile_stand_in)
        evaluator_class = _EvaluatorStandIn

    state = tmp_path_factory.mktemp("attempts")
    saved_env = dict(os.environ)  # ray.init sets RAY_AUTH_MODE here; later tests' subprocesses must not inherit it
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        stages = StandInStages(Cluster(address=None, num_cpus=2, num_gpus=0, placement=Placement(1, dict(num_cpus=1))),
                               "unused.py", "small")
        jobs = [Job(cid, json.dumps(dict(plan, state=str(state)))) for cid, plan in PLANS.items()]
        stages.prestart("none", "triton")
        events = list(stages.run(jobs, EvalSettings()))
        warm_up_s = stages.warm_up_s()
    finally:
        ray.shutdown()
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
        os.environ.clear()
        os.environ.update(saved_env)
    return StagesRun(events, state, warm_up_s)


@pytest.mark.slow
def test_each_candidate_leaves_the_stages_exactly_once(stages_run):
    assert sorted(e.candidate_id for e in stages_run.events if e.kind == "done") == sorted(PLANS)


@pytest.mark.slow
def test_each_evaluators_warm_up_before_its_first_candidate_is_reported(stages_run):
    assert stages_run.warm_up_s == [2.5]  # one evaluator; its later deaths and restarts do not lose the figure


@pytest.mark.slow
def test_an_evaluator_is_given_its_first_candidate_once_its_warm_up_is_over(stages_run):
    """Its warm-up (a second long here) and its first candidate would share its one-time work: the candidate waits."""
    first = min((e.result.details["when"] for e in stages_run.events if e.kind == "done"
                 and "when" in e.result.details), key=lambda w: w["started"])
    assert first["warmed_at"] is not None and first["started"] >= first["warmed_at"]


@pytest.mark.slow
def test_work_of_a_dead_worker_is_requeued_and_finishes(stages_run):
    compiled_again, timed_again = stages_run.done(2), stages_run.done(3)
    assert (compiled_again.outcome, stages_run.attempts(2, "compile")) == ("correct", 2)
    assert [(a["stage"], a["kind"]) for a in compiled_again.details["requeued"]] == [("compile", "worker_died")]
    assert (timed_again.outcome, stages_run.attempts(3, "evaluate")) == ("correct", 3)
    assert [(a["stage"], a["kind"]) for a in timed_again.details["requeued"]] == [("evaluation", "worker_died")] * 2
    assert all(a["node"] for a in timed_again.details["requeued"])  # the node of the evaluator that died
    notes = [e.note for e in stages_run.events if e.kind == "requeued" and e.candidate_id == 3]
    assert len(notes) == 2 and "attempt 3 of 3" in notes[1]
    assert "requeued" not in stages_run.done(1).details


@pytest.mark.slow
def test_a_worker_that_keeps_dying_costs_a_harness_error_after_three_attempts(stages_run):
    result = stages_run.done(4)
    assert stages_run.attempts(4, "evaluate") == 3
    assert result.outcome == "harness_error"
    assert "kept dying" in result.message and "not the candidate's fault" in result.message
    assert len(result.details["requeued"]) == 3


@pytest.mark.slow
def test_a_harness_error_is_evaluated_once_more(stages_run):
    recovered, persistent = stages_run.done(5), stages_run.done(6)
    assert (recovered.outcome, stages_run.attempts(5, "evaluate")) == ("correct", 2)
    assert [a["kind"] for a in recovered.details["requeued"]] == ["harness_error"]
    assert (persistent.outcome, stages_run.attempts(6, "evaluate")) == ("harness_error", 2)
    assert persistent.message == "the judge lost its runner"  # the judge's own words are kept


@pytest.mark.slow
def test_an_evaluator_whose_node_has_another_problem_file_stops_the_search_in_one_line():
    """A Triton candidate's compile stage no longer loads the problem, so the evaluator is where a node whose
    problem file differs from the driver's is met: its start fails, and the stages say why in one line rather
    than start new evaluators that fail the same way forever. Real Ray and kgen's own evaluator; the differing
    file is a source hash the driver's copy does not have."""
    import logging

    import ray

    from kgen.core.errors import KgenError
    from kgen.core.records import EvalSettings
    from kgen.problems.problem import resolve_problem_path
    from kgen.search.cluster import Cluster, Placement
    from kgen.search.workers import Job, Stages

    saved_env = dict(os.environ)
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        stages = Stages(Cluster(address=None, num_cpus=2, num_gpus=0, placement=Placement(1, dict(num_cpus=1))),
                        str(resolve_problem_path("softmax")), "small", "0123456789abcdef")
        with pytest.raises(KgenError, match="differs from the driver's: install the same kgen on every Ray node"):
            stages.device()
        source = (Path(__file__).parent.parent / "problems/starters/softmax/triton_online_two_pass.py").read_text()
        stages.submit([Job(1, source)], EvalSettings())
        deadline = time.monotonic() + 120
        with pytest.raises(KgenError, match="differs from the driver's"):
            while time.monotonic() < deadline:
                stages.poll()
    finally:
        ray.shutdown()
        os.environ.clear()
        os.environ.update(saved_env)


# --- a real cluster of Ray nodes on this machine ---------------------------------------------------

def _session_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[3])


@dataclass
class RayNode:
    """One `ray start --block` in a session of its own: the node's raylet and every worker it starts
    live in that session, so the node can be killed whole, like a machine that loses power."""

    proc: subprocess.Popen
    log: Path
    node_id: str = ""  # as ray.nodes() and the evaluations' details name it

    @classmethod
    def start(cls, args: list[str], env: dict, log: Path) -> "RayNode":
        with open(log, "w") as out:
            proc = subprocess.Popen([RAY, "start", *args, "--block"], env=env, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        node = cls(proc, log)
        deadline = time.monotonic() + 180
        while "Ray runtime started" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, f"ray start failed:\n{log.read_text()}"
            time.sleep(0.5)
        node.node_id = node._raylet_node_id()
        return node

    def pids(self) -> list[int]:
        found = []
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    if _session_of(int(entry)) == self.proc.pid:
                        found.append(int(entry))
                except (OSError, ValueError, IndexError):
                    pass
        return found

    def _raylet_node_id(self) -> str:
        for pid in self.pids():
            try:
                args = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
            except OSError:
                continue
            if args[0].endswith("/raylet"):
                return next(a.split("=", 1)[1] for a in args if a.startswith("--node_id="))
        raise AssertionError("this node has no raylet")

    def kill(self) -> None:
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # ray start --block stops its node's processes
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=30)
        self.kill()


@dataclass
class RayCluster:
    address: str
    env: dict  # what a process joining the cluster needs: RAY_AUTH_MODE=token and the token's file
    head: RayNode
    gpu_node: RayNode
    add_node: Callable[..., RayNode]  # (name, cpus, resources): another node, stopped with the cluster


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _token_cluster(home: Path):
    """The setting of a Ray cluster on 127.0.0.1 whose nodes join with a token: (env, address, port, start, nodes),
    where start(name, args) starts a node (logging to home/name.log) and keeps it in nodes. Every node is stopped,
    last first, and Ray's temp folder removed on exit."""
    token_file = home / "auth_token"
    token_file.write_text(secrets.token_hex(32))
    ray_tmp = tempfile.mkdtemp(prefix="kgen-ray-", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token_file), RAY_USAGE_STATS_ENABLED="0",
               KGEN_CACHE_DIR=str(home / "kgen-cache"))
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--temp-dir", ray_tmp, "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    nodes: list[RayNode] = []

    def start(name: str, args: list[str]) -> RayNode:
        nodes.append(RayNode.start([*args, *common], env, home / f"{name}.log"))
        return nodes[-1]

    try:
        yield env, address, port, start, nodes
    finally:
        for node in reversed(nodes):
            node.stop()
        shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> RayCluster:
    """A head node with one CPU (the driver attaches to it; it compiles, never evaluates) and a node with two
    CPUs and one `kgen_gpu`, joined with a token."""
    with _token_cluster(tmp_path_factory.mktemp("cluster")) as (env, address, port, start, _):
        def add_node(name: str, cpus: int, resources: dict) -> RayNode:
            return start(name, ["--address", address, "--num-cpus", str(cpus), "--resources", json.dumps(resources)])

        head = start("head", ["--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard", "false"])
        gpu_node = add_node("gpu_node", 2, {EVALUATOR_RESOURCE: 1})
        yield RayCluster(address, env, head, gpu_node, add_node)


def _kgen(args: list[str], env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    """The real CLI with exactly `env` (conftest's run_kgen adds this process's environment)."""
    return subprocess.run([sys.executable, "-m", "kgen", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)


def _search_args(cluster: RayCluster, db: Path, candidates: int) -> list[str]:
    return ["search", "--problem", "softmax", "--rounds", "1", "--candidates", str(candidates), "--proposer", "offline",
            "--language", "triton", "--size", "small", "--ray-address", cluster.address, "--db", str(db), "--quiet"]


def _evaluations(db: Path) -> list[tuple[int, str, dict]]:
    """(candidate id, outcome, details) of every stored evaluation, candidates without one as (id, None, {})."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT c.id, e.outcome, e.details FROM candidates c "
                            "LEFT JOIN evaluations e ON e.candidate_id = c.id ORDER BY c.id").fetchall()
    return [(cid, outcome, json.loads(details or "{}")) for cid, outcome, details in rows]


@pytest.mark.slow
def test_compiles_run_on_both_nodes_and_evaluations_only_where_the_gpu_resource_is(cluster, tmp_path):
    db = tmp_path / "results.db"
    done = _kgen(_search_args(cluster, db, 4), cluster.env)
    assert done.returncode == 0, done.stdout + done.stderr
    evaluations = _evaluations(db)
    assert len(evaluations) == 4 and {outcome for _, outcome, _ in evaluations} == {"correct"}, evaluations
    compile_nodes = {d["nodes"]["compile"]["node_id"] for _, _, d in evaluations}
    evaluation_nodes = {d["nodes"]["evaluation"]["node_id"] for _, _, d in evaluations}
    assert {cluster.head.node_id, cluster.gpu_node.node_id} <= compile_nodes
    assert evaluation_nodes == {cluster.gpu_node.node_id}


@pytest.mark.slow
def test_a_node_killed_mid_run_loses_nothing_and_its_candidates_are_requeued(cluster, tmp_path):
    doomed = cluster.add_node("doomed", 1, {EVALUATOR_RESOURCE: 1})  # a second evaluator, on its own node
    db = tmp_path / "results.db"
    proc = subprocess.Popen([sys.executable, "-m", "kgen", *_search_args(cluster, db, 6)], env=cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 400
    while True:  # until the doomed node has finished one candidate and taken the next
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"the search ended, or took too long, before the doomed node evaluated anything:\n"
                                 f"{proc.communicate()[0]}")
        try:
            evaluations = _evaluations(db) if db.exists() else []
        except sqlite3.OperationalError:  # the tables are not there yet
            evaluations = []
        by_doomed = [cid for cid, _, d in evaluations if d.get("nodes", {}).get("evaluation", {}).get("node_id")
                     == doomed.node_id]
        if by_doomed:
            break
        time.sleep(0.2)
    unfinished = sum(outcome is None for _, outcome, _ in evaluations)
    # at most one of them is on the other evaluator, so the doomed one, free again, has taken another
    assert unfinished >= 2, f"the doomed node finished its first candidate too late to test anything: {evaluations}"
    doomed.kill()
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out

    evaluations = _evaluations(db)
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT status FROM runs").fetchall() == [("finished",)]
        per_candidate = conn.execute("SELECT c.id, COUNT(e.id) FROM candidates c LEFT JOIN evaluations e "
                                     "ON e.candidate_id = c.id GROUP BY c.id").fetchall()
    assert len(per_candidate) == 6 and {n for _, n in per_candidate} == {1}  # none lost, none stored twice
    assert {outcome for _, outcome, _ in evaluations} == {"correct"}, evaluations
    requeued = {cid: d["requeued"] for cid, _, d in evaluations if "requeued" in d}
    from_doomed = [cid for cid, attempts in requeued.items()
                   if any(a["node"] == doomed.node_id and a["stage"] == "evaluation" for a in attempts)]
    assert from_doomed, f"nothing in flight on the killed node was re-queued: {requeued}\n{out}"
    for cid, _, details in evaluations:
        if cid in from_doomed:
            assert details["nodes"]["evaluation"]["node_id"] == cluster.gpu_node.node_id
    assert "re-queued" in out


def _without(env: dict, *names: str, **changes: str) -> dict:
    return {**{k: v for k, v in env.items() if k not in names}, **changes}


@pytest.mark.slow
@pytest.mark.parametrize("case, message", [
    ("no auth mode", "requires token authentication: set RAY_AUTH_MODE=token"),
    ("wrong token", "rejected the auth token from"),
    ("no token", "RAY_AUTH_MODE=token but this machine has no Ray auth token"),
])
def test_joining_without_the_clusters_token_is_one_line_and_exit_2(cluster, tmp_path, case, message):
    wrong = tmp_path / "wrong_token"
    wrong.write_text(secrets.token_hex(32))
    env = {"no auth mode": _without(cluster.env, "RAY_AUTH_MODE"),
           "wrong token": _without(cluster.env, RAY_AUTH_TOKEN_PATH=str(wrong)),
           "no token": _without(cluster.env, "RAY_AUTH_TOKEN_PATH", HOME=str(tmp_path))}[case]
    db = tmp_path / "results.db"
    done = _kgen(_search_args(cluster, db, 1), env, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0 and message in done.stderr, done.stderr
    assert "ray get-auth-token" in done.stderr
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchall() == [(0,)]


# --- placement that always progresses: CPU-only clusters of one-CPU nodes, and nodes of different sizes ----

@dataclass
class CpuCluster:
    address: str
    env: dict
    nodes: list  # RayNode, the head first
    add_node: Callable[..., RayNode]  # (name, cpus): another node, stopped with the cluster


@pytest.fixture(scope="module")
def cpu_cluster(tmp_path_factory) -> CpuCluster:
    """Two nodes of one CPU each and no GPU (nor kgen_gpu): every evaluator runs on CPUs, joined with a token."""
    with _token_cluster(tmp_path_factory.mktemp("cpu_cluster")) as (env, address, port, start, nodes):
        def add_node(name: str, cpus: int) -> RayNode:
            return start(name, ["--address", address, "--num-cpus", str(cpus)])

        start("head", ["--head", "--port", str(port), "--num-cpus", "1", "--include-dashboard", "false"])
        add_node("worker", 1)
        yield CpuCluster(address, env, nodes, add_node)


def _search_finishes(cluster, db: Path, candidates: int = 2) -> list[tuple[int, str, dict]]:
    started = time.monotonic()
    done = _kgen(_search_args(cluster, db, candidates), cluster.env, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    evaluations = _evaluations(db)
    assert [outcome for _, outcome, _ in evaluations] == ["correct"] * candidates, evaluations
    assert time.monotonic() - started < 400
    return evaluations


@pytest.mark.slow
def test_a_search_on_two_one_cpu_nodes_finishes(cpu_cluster, tmp_path):
    """Both evaluators (half a CPU each) share one node; the other node's CPU is the compile tasks'."""
    evaluations = _search_finishes(cpu_cluster, tmp_path / "results.db")
    compile_nodes = {d["nodes"]["compile"]["node_id"] for _, _, d in evaluations}
    evaluation_nodes = {d["nodes"]["evaluation"]["node_id"] for _, _, d in evaluations}
    assert len(compile_nodes) == len(evaluation_nodes) == 1 and compile_nodes != evaluation_nodes
    assert compile_nodes | evaluation_nodes == {node.node_id for node in cpu_cluster.nodes}


HOLDER = """
import logging, sys, time, ray
from ray.util.placement_group import placement_group
ray.init(address=sys.argv[1], log_to_driver=False, logging_level=logging.ERROR)
nodes = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
group = placement_group([{"CPU": 1}] * len(nodes), bundle_label_selector=[{"ray.io/node-id": n} for n in nodes])
assert group.wait(60)
print("held", flush=True)
time.sleep(600)
"""


@pytest.mark.slow
def test_a_search_whose_work_cannot_be_placed_stops_with_one_line_saying_what_each_node_lacks(cpu_cluster,
                                                                                              tmp_path):
    """Another job holds every CPU: the search stops after the placement wait (shortened here from a minute)
    with one line naming the nodes and what they lack, and no run is left behind."""
    from kgen.search.cluster import PLACEMENT_WAIT_S

    assert PLACEMENT_WAIT_S == 60  # the default: a minute
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, cpu_cluster.address], env=cpu_cluster.env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        db = tmp_path / "results.db"
        started = time.monotonic()
        done = _kgen(_search_args(cpu_cluster, db, 2), dict(cpu_cluster.env, KGEN_PLACEMENT_WAIT_S="5"), timeout=120)
        took = time.monotonic() - started
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "within 5 s" in done.stderr and "lacks CPU" in done.stderr
    for node in cpu_cluster.nodes:
        assert node.node_id[:8] in done.stderr
    assert took < 60
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchall() == [(0,)]


@pytest.mark.slow
def test_a_search_on_nodes_of_different_cpu_counts_finishes(cpu_cluster, tmp_path):
    """One CPU on the head, two on the other node: an evaluator on each, the compile tasks on the bigger."""
    cpu_cluster.nodes[1].stop()  # the one-CPU worker goes; a two-CPU one comes
    bigger = cpu_cluster.add_node("bigger", 2)
    evaluations = _search_finishes(cpu_cluster, tmp_path / "results.db")
    assert {d["nodes"]["compile"]["node_id"] for _, _, d in evaluations} == {bigger.node_id}
