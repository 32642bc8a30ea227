"""The Ray cluster a search runs on: starting or joining it, and where its evaluators go.

`connect(None)` starts a local cluster sized to this machine (always a new one: neither RAY_ADDRESS
nor a cluster that `ray start` recorded here is joined unasked); `connect("auto")`,
`connect("HOST:PORT")` or `connect("ray://HOST:PORT")` joins a running one. Before joining, kgen
checks in a second what Ray would otherwise take ~20 s to report as "Failed to connect": that
something listens at the address, and that this machine holds the token a cluster with token
authentication (Ray >= 2.52; default for clusters Ray starts itself from 2.59) asks for.

Evaluators (one candidate at a time each) go, in order of preference, to:
- the `kgen_gpu` custom resource, one evaluator per unit, where any node advertises it
  (`ray start --resources '{"kgen_gpu": 2}'`): to keep kgen off some GPUs, or to stand in for GPUs
  on machines without any (tests, rehearsals; candidates then run in Triton's interpreter);
- otherwise two evaluators per GPU where this machine's GPU has 40 GiB or more, else one (`num_gpus=0.5`; Ray
  packs both halves of a GPU before the next, and gives each its CUDA_VISIBLE_DEVICES): their untimed work
  (references, compile steps, sandboxes' starts, verification) overlaps, while a timed measurement has the GPU to
  itself (kgen.judge.gpu_lock: the judge holds its GPU shared but for its timed runs, and alone all through where
  two evaluations would not fit in its memory). KGEN_EVALUATORS_PER_GPU=N sets how many (evaluators_per_gpu);
- otherwise, with no GPU anywhere, CPU evaluators under Triton's interpreter.
Each GPU's evaluators take a CPU of its node together (a share of one where the node has fewer); the CPUs left on
each node are the compile tasks' (one CPU each). The plan is made from each node's own resources and
reserved whole before any work starts (a placement group, each bundle pinned to its node), so no
evaluator can take the CPUs every compile task waits for (two half-CPU evaluators that Ray put on two
one-CPU nodes used to leave no whole CPU anywhere, and the search waited forever). A cluster that cannot
hold the plan stops the search in PLACEMENT_WAIT_S with one line saying what each node lacks.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from kgen.core.errors import KgenError

EVALUATOR_RESOURCE = "kgen_gpu"


# A search whose work the cluster cannot place stops after this, saying what is missing (tests shorten it).
PLACEMENT_WAIT_S = float(os.environ.get("KGEN_PLACEMENT_WAIT_S", "60"))


@dataclass(frozen=True)
class Slot:
    """Resources kgen reserves on one Ray node: one evaluator's, or the CPUs its compile tasks share there."""

    node_id: str
    resources: dict
    node: str = ""  # for people: the node's id (short) and address


@dataclass(frozen=True)
class Placement:
    """How many evaluators a cluster gets, and the Ray actor options that place each one. Where
    `evaluators` is given, each evaluator has a slot on a node of its own choosing and the compile tasks
    share `compiles` (each taking `compile_cpus`), all reserved together (see reserve), so the work can
    always go on: no evaluator can take the CPUs the compile tasks wait for."""

    count: int
    actor_options: dict = field(default_factory=dict)
    described: str = ""  # for people: "1 per GPU", "1 per kgen_gpu", "CPUs (no GPU)"
    evaluators: tuple[Slot, ...] = ()
    compiles: tuple[Slot, ...] = ()
    compile_cpus: float = 1.0
    per_gpu: int = 1  # evaluators sharing each GPU (or kgen_gpu unit)


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster this search runs on."""

    address: Optional[str]  # None: a local cluster started here
    num_cpus: int
    num_gpus: int
    placement: Placement


# the GPU memory below which each GPU gets one evaluator by default: two evaluators' spare sandboxes hold ~8 GB of
# CUDA contexts between them, beside two evaluations
SHARED_GPU_MIN_BYTES = 40 << 30


def evaluators_per_gpu(gpus: bool = True) -> int:
    """Evaluators that share each GPU (or each kgen_gpu unit): KGEN_EVALUATORS_PER_GPU (1 to 4), else 2 on real GPUs
    where this machine's first GPU has SHARED_GPU_MIN_BYTES or more (one candidate's untimed work beside the
    other's: on the H100 box each evaluation spent about half its seconds outside its timed runs, RESULTS.md), and 1
    otherwise: on a smaller GPU, on a cluster joined from a machine without one (its GPUs unknown here), and on kgen_gpu
    stand-ins without a GPU."""
    setting = os.environ.get("KGEN_EVALUATORS_PER_GPU", "").strip()
    if setting:
        try:
            return max(1, min(4, int(setting)))
        except ValueError:
            raise KgenError(f"KGEN_EVALUATORS_PER_GPU={setting!r}: give a whole number from 1 to 4") from None
    return 2 if gpus and _local_gpu_bytes() >= SHARED_GPU_MIN_BYTES else 1


def _local_gpu_bytes() -> int:
    """This machine's first GPU's memory, or 0 without one."""
    try:
        import torch

        return int(torch.cuda.get_device_properties(0).total_memory) if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 - no usable GPU here
        return 0


def _node_name(node: dict) -> str:
    return f"{str(node.get('NodeID', '?'))[:8]} ({node.get('NodeManagerAddress', '?')})"


def _bundle(cpus: float, extra: dict) -> dict:
    return {**({"CPU": round(cpus, 4)} if cpus > 0 else {}), **extra}


def evaluator_placement(nodes: list[dict], per_gpu: Optional[int] = None) -> Placement:
    """Where evaluators and compile tasks go on a cluster whose nodes are `nodes` (as `ray.nodes()`
    lists them), from each node's own resources: evaluators one per kgen_gpu, else per GPU, else on
    CPUs; each takes a CPU (a share of one where its node has fewer CPUs than evaluators), and the CPUs
    left on each node are the compile tasks'. At least one compile task always fits somewhere: where no
    node has a whole CPU left, the node with the most CPUs shares them between its evaluators and the
    compile tasks. A cluster without a CPU anywhere is a KgenError that names its nodes. `per_gpu`: evaluators
    sharing each GPU or kgen_gpu unit (default: evaluators_per_gpu), each taking that share of it."""
    alive = [n for n in nodes if n.get("Alive", True)]
    resources = [n.get("Resources", {}) for n in alive]
    cpus = [float(r.get("CPU", 0)) for r in resources]
    if not alive or sum(cpus) <= 0:
        listed = ", ".join(f"node {_node_name(n)} with 0 CPUs" for n in alive) or "no live node"
        raise KgenError(f"the Ray cluster has no CPU for kgen's compile tasks and evaluators ({listed}); "
                        "start its nodes with CPUs (`ray start --num-cpus N`)")
    gpus = [int(r.get("GPU", 0)) for r in resources]
    stand_ins = [int(r.get(EVALUATOR_RESOURCE, 0)) for r in resources]
    if not any(stand_ins) and not any(gpus):
        return _cpu_placement(alive, cpus)
    k = per_gpu if per_gpu is not None else evaluators_per_gpu(gpus=any(gpus))
    share = round(1 / k, 4)
    if any(stand_ins) and any(gpus):  # a real GPU each as well, on the nodes that have both
        per_node, extra = [min(s, g) for s, g in zip(stand_ins, gpus)], {"GPU": share, EVALUATOR_RESOURCE: share}
        described = f"{k} per {EVALUATOR_RESOURCE} with a GPU"
    elif any(stand_ins):
        per_node, extra = stand_ins, {EVALUATOR_RESOURCE: share}
        described = f"{k} per {EVALUATOR_RESOURCE} (no GPU: Triton's interpreter)"
    else:
        per_node, extra, described = gpus, {"GPU": share}, f"{k} per GPU"
    # each GPU (unit) takes a CPU (a share of one where its node has fewer), split between the evaluators sharing
    # it: only one of them times at a time
    units = [min(1.0, c / n) if n else 0.0 for c, n in zip(cpus, per_node)]
    left = [c - n * e for c, n, e in zip(cpus, per_node, units)]
    if max(left) < 1:  # no whole CPU left anywhere: the biggest node shares its CPUs with the compile tasks
        j = max(range(len(alive)), key=lambda i: cpus[i])
        if per_node[j]:
            units[j] = cpus[j] / (per_node[j] + 1)
        left[j] = cpus[j] - per_node[j] * units[j]
    shares = [round(u / k, 4) for u in units]
    evaluators = tuple(Slot(n["NodeID"], _bundle(e, extra), _node_name(n))
                       for n, count, e in zip(alive, per_node, shares) for _ in range(count * k))
    return replace(_placement(alive, evaluators, left, described), per_gpu=k)


def _cpu_placement(alive: list[dict], cpus: list[float]) -> Placement:
    """No GPU anywhere: CPU evaluators under Triton's interpreter. One CPU is kept for compile tasks on
    the node with the most; the others each take an evaluator (two on half a CPU each where the cluster
    has two CPUs in all: the interpreter leaves gaps; one sharing a lone CPU with the compile tasks)."""
    total = sum(cpus)
    biggest = max(range(len(alive)), key=lambda i: cpus[i])
    if total < 2:
        share, count = total / 2, 1
        room = [0.0] * len(alive)
        room[biggest] = share
    else:
        share, count = (0.5, 2) if total < 3 else (1.0, int(total) - 1)
        room = [c - (1.0 if i == biggest else 0.0) for i, c in enumerate(cpus)]
    used = [0.0] * len(alive)
    placed: list[int] = []
    for _ in range(count):
        i = max(range(len(alive)), key=lambda i: room[i] - used[i])
        if room[i] - used[i] < share - 1e-9:
            break
        used[i] += share
        placed.append(i)
    evaluators = tuple(Slot(alive[i]["NodeID"], _bundle(share, {}), _node_name(alive[i])) for i in sorted(placed))
    return _placement(alive, evaluators, [c - u for c, u in zip(cpus, used)], "CPUs (no GPU: Triton's interpreter)")


def _placement(alive: list[dict], evaluators: tuple[Slot, ...], left: list[float], described: str) -> Placement:
    compiles = tuple(Slot(n["NodeID"], {"CPU": round(c, 4)}, _node_name(n)) for n, c in zip(alive, left) if c > 1e-9)
    first = evaluators[0].resources
    options = {"num_cpus": first.get("CPU", 0)}
    if "GPU" in first:
        options["num_gpus"] = first["GPU"]
    if EVALUATOR_RESOURCE in first:
        options["resources"] = {EVALUATOR_RESOURCE: first[EVALUATOR_RESOURCE]}
    return Placement(len(evaluators), options, described, evaluators, compiles,
                     compile_cpus=min(1.0, max(c.resources["CPU"] for c in compiles)))


class Reservation:
    """A placement's slots reserved on the cluster (one Ray placement group, each slot a bundle pinned
    to its node): evaluators go into theirs, compile tasks into any compile slot with room."""

    def __init__(self, placement: Placement, wait_s: float = PLACEMENT_WAIT_S):
        import ray
        from ray.util.placement_group import placement_group, remove_placement_group

        self.placement = placement
        slots = [*placement.evaluators, *placement.compiles]
        self.group = placement_group([dict(s.resources) for s in slots], strategy="PACK",
                                     bundle_label_selector=[{"ray.io/node-id": s.node_id} for s in slots])
        if not self.group.wait(wait_s):
            missing = _missing(slots)
            remove_placement_group(self.group)
            raise KgenError(f"the Ray cluster could not give kgen its evaluators and compile slot within "
                            f"{wait_s:.0f} s: {missing} (other work holds them, or a node left; `ray status` "
                            "shows the cluster's resources)")
        self._ray = ray

    def _strategy(self, index: int):
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        return PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index)

    def actor_options(self, index: int) -> dict:
        """Evaluator `index`'s Ray options: its slot's resources, in its bundle."""
        resources = dict(self.placement.evaluators[index].resources)
        options: dict = {"num_cpus": resources.pop("CPU", 0), "scheduling_strategy": self._strategy(index)}
        gpu = resources.pop("GPU", 0)
        if gpu:
            options["num_gpus"] = gpu  # a share of one where evaluators share their GPU (evaluators_per_gpu)
        if resources:
            options["resources"] = resources
        return options

    def compile_options(self) -> dict:
        """A compile task's Ray options: its CPUs, in whichever compile slot has them free."""
        return {"num_cpus": self.placement.compile_cpus, "scheduling_strategy": self._strategy(-1)}

    def release(self) -> None:
        from ray.util.placement_group import remove_placement_group

        with contextlib.suppress(Exception):  # the cluster may be gone already
            remove_placement_group(self.group)


def _missing(slots: list[Slot]) -> str:
    """What each node lacks of what the slots ask of it, as Ray reports its free resources now."""
    try:
        from ray._private.state import available_resources_per_node

        free = available_resources_per_node()
    except Exception:  # noqa: BLE001 - a Ray without this call: say what was asked instead
        free = None
    wanted: dict[str, dict[str, float]] = {}
    names: dict[str, str] = {}
    for slot in slots:
        names[slot.node_id] = slot.node
        for name, amount in slot.resources.items():
            wanted.setdefault(slot.node_id, {})[name] = wanted.get(slot.node_id, {}).get(name, 0) + amount
    parts = []
    for node_id, asked in wanted.items():
        have = (free or {}).get(node_id)
        lacking = [f"{name} {amount:g} ({have.get(name, 0):g} free)" if have is not None else f"{name} {amount:g}"
                   for name, amount in asked.items() if have is None or have.get(name, 0) + 1e-9 < amount]
        if lacking:
            parts.append(f"node {names[node_id]} lacks {', '.join(lacking)}")
    return "; ".join(parts) or "every node has what was asked now (the cluster changed while kgen waited)"


def _check_reachable(address: str, timeout_s: float = 5.0) -> None:
    """Fail fast with one line: Ray itself waits a long time on an address nobody listens at."""
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"tcp://{address}")
    if parts.scheme not in ("tcp", "ray") or not parts.hostname:
        raise KgenError(f"bad --ray-address '{address}' (use auto, HOST:PORT or ray://HOST:PORT)")
    try:
        port = parts.port or (10001 if parts.scheme == "ray" else 6379)
    except ValueError:
        raise KgenError(f"bad --ray-address '{address}': the port is not a number") from None
    try:
        with socket.create_connection((parts.hostname, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise KgenError(f"cannot reach the Ray cluster at {address}: {e.strerror or e}") from None


TOKEN_HELP = ("`ray get-auth-token` on the head node prints the cluster's token; put it in ~/.ray/auth_token "
              "here (or point RAY_AUTH_TOKEN_PATH at a file holding it, or set RAY_AUTH_TOKEN)")


def _token_source() -> str:
    """Where Ray takes this process's token from, in Ray's order of precedence."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return "RAY_AUTH_TOKEN"
    if os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return os.environ["RAY_AUTH_TOKEN_PATH"]
    return str(Path.home() / ".ray" / "auth_token")


@contextlib.contextmanager
def _stderr_silenced() -> Iterator[None]:
    """Ray's C++ client logs each refused call to file descriptor 2; kgen says it in one line instead."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _check_token(address: str) -> None:
    """One GCS call with this process's token settings, before ray.init: a cluster that wants a token
    this machine lacks (or holds a different one) is named in one line, at once. A Ray without token
    authentication (< 2.52), a Ray Client address (ray://) or an address Ray cannot resolve is left
    to ray.init to report."""
    if address.startswith("ray://"):
        return
    try:
        from ray._private import services
        from ray._private.authentication.authentication_token_setup import maybe_enable_token_auth_if_token_available
        from ray._raylet import AuthenticationMode, AuthenticationTokenLoader, GcsClient, get_authentication_mode
        from ray.exceptions import AuthenticationError
    except ImportError:
        return
    if address == "auto":  # ray.init turns token mode on for "auto" when a token is at hand; so do we
        maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    try:
        gcs_address = services.canonicalize_bootstrap_address(address)
    except Exception:  # noqa: BLE001 - ray.init reports a bad or missing address in its own words
        return
    if gcs_address is None:
        return
    token_mode = get_authentication_mode() == AuthenticationMode.TOKEN
    if token_mode:  # checked first: Ray's client aborts the process when token mode has no token to send
        try:
            has_token = AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)
        except AuthenticationError as e:  # e.g. RAY_AUTH_TOKEN_PATH names a file that is not there
            raise KgenError(f"cannot read the Ray auth token from {_token_source()}: {str(e).splitlines()[0]}") \
                from None
        if not has_token:
            raise KgenError(f"RAY_AUTH_MODE=token but this machine has no Ray auth token; {TOKEN_HELP}")
    try:
        with _stderr_silenced():
            GcsClient(address=gcs_address)
    except AuthenticationError:
        if token_mode:
            raise KgenError(f"the Ray cluster at {address} rejected the auth token from {_token_source()}; "
                            f"{TOKEN_HELP}") from None
        raise KgenError(f"the Ray cluster at {address} requires token authentication: set RAY_AUTH_MODE=token; "
                        f"{TOKEN_HELP}") from None
    except Exception:  # noqa: BLE001 - anything else (a slow GCS, not a GCS): ray.init says what
        return


def check_gpu_count(num_gpus: int, address: Optional[str] = None) -> None:
    """A local cluster can use 1 to all of this machine's GPUs; a joined cluster has its own."""
    import torch

    if address:
        raise KgenError("a GPU count is for a local cluster; a cluster joined with --ray-address has its own")
    if not 1 <= num_gpus <= torch.cuda.device_count():
        raise KgenError(f"cannot use {num_gpus} GPU(s): this machine has {torch.cuda.device_count()}")


def _local_start_options() -> dict:
    """How a local cluster starts. Ray prestarts one Python worker per CPU for the first driver; kgen's first
    work is one evaluator actor and a round of compile tasks, and the prestarted workers (16 on the H100 box,
    each importing Ray) compete with the evaluator's own start for the CPUs. Without them `ray.init` took
    5.5-5.8 s there against 7.4-8.1 s (benchmarks/ray_start.py, RESULTS.md, twelfth session); workers then
    start as work asks for them. KGEN_RAY_PRESTART=1 keeps Ray's default."""
    if os.environ.get("KGEN_RAY_PRESTART") == "1":
        return {}
    return {"_system_config": {"prestart_worker_first_driver": False}}


def connect(address: Optional[str] = None, num_gpus: Optional[int] = None) -> Cluster:
    """Start a local Ray cluster (address None) or join one ('auto', 'HOST:PORT', 'ray://HOST:PORT').
    `num_gpus`: a local cluster that uses only the first this many of this machine's GPUs (kgen bench's
    GPU scaling runs)."""
    import ray
    from ray.exceptions import AuthenticationError

    if num_gpus is not None:
        check_gpu_count(num_gpus, address)
    if address:
        _check_reachable(address)
        _check_token(address)
    kwargs = dict(log_to_driver=False, logging_level=logging.ERROR)
    main_thread = threading.current_thread() is threading.main_thread()
    sigterm = signal.getsignal(signal.SIGTERM) if main_thread else None
    try:
        if address:
            ray.init(address=address, **kwargs)
        else:  # "local": a new cluster even where `ray start` left one recorded (perhaps dead) on this machine
            ray.init(address="local", include_dashboard=False, num_gpus=num_gpus, **_local_start_options(), **kwargs)
    except AuthenticationError as e:
        raise KgenError(f"the Ray cluster at {address} refused this machine's token ({str(e).splitlines()[0]}); "
                        f"{TOKEN_HELP}") from None
    except (ConnectionError, TimeoutError, ValueError) as e:
        raise KgenError(f"cannot join the Ray cluster at {address}: {str(e).splitlines()[0]}") from None
    finally:
        # ray.init replaces the SIGTERM handler with sys.exit, which would mark a `kill`ed search
        # failed; the CLI's handler (stop as Ctrl-C does: run marked interrupted) goes back.
        if sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
    resources = ray.cluster_resources()
    return Cluster(address=address, num_cpus=max(1, int(resources.get("CPU", 1))),
                   num_gpus=int(resources.get("GPU", 0)), placement=evaluator_placement(ray.nodes()))


def shutdown() -> None:
    import ray

    if ray.is_initialized():
        ray.shutdown()


def where_am_i() -> dict:
    """The Ray node this worker runs on (its id, as `ray.nodes()` lists it, and its IP), for the
    evaluation's details: where each stage of a candidate ran."""
    import ray

    return {"node_id": ray.get_runtime_context().get_node_id(), "ip": ray.util.get_node_ip_address()}
