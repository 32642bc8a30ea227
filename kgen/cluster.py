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
- otherwise one evaluator per GPU (`num_gpus=1`, so Ray gives each its own CUDA_VISIBLE_DEVICES);
- otherwise, with no GPU anywhere, CPU evaluators under Triton's interpreter.
Compile tasks take one CPU each, anywhere in the cluster.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional
from urllib.parse import urlsplit

from kgen.errors import KgenError

EVALUATOR_RESOURCE = "kgen_gpu"


@dataclass(frozen=True)
class Placement:
    """How many evaluators a cluster gets, and the Ray actor options that place each one."""

    count: int
    actor_options: dict = field(default_factory=dict)
    described: str = ""  # for people: "1 per GPU", "1 per kgen_gpu", "CPUs (no GPU)"


@dataclass(frozen=True)
class Cluster:
    """The Ray cluster this search runs on."""

    address: Optional[str]  # None: a local cluster started here
    num_cpus: int
    num_gpus: int
    placement: Placement


def evaluator_placement(nodes: list[dict]) -> Placement:
    """Where evaluators go on a cluster whose nodes are `nodes` (as `ray.nodes()` lists them)."""
    alive = [n.get("Resources", {}) for n in nodes if n.get("Alive", True)]
    gpus = [int(r.get("GPU", 0)) for r in alive]
    stand_ins = [int(r.get(EVALUATOR_RESOURCE, 0)) for r in alive]
    if any(stand_ins):
        if any(gpus):  # a real GPU each as well, on the nodes that have both
            count = sum(min(s, g) for s, g in zip(stand_ins, gpus))
            return Placement(count, dict(num_cpus=1, num_gpus=1, resources={EVALUATOR_RESOURCE: 1}),
                             f"1 per {EVALUATOR_RESOURCE} with a GPU")
        return Placement(sum(stand_ins), dict(num_cpus=1, resources={EVALUATOR_RESOURCE: 1}),
                         f"1 per {EVALUATOR_RESOURCE} (no GPU: Triton's interpreter)")
    if any(gpus):
        return Placement(sum(gpus), dict(num_cpus=1, num_gpus=1), "1 per GPU")
    cpus = sum(int(r.get("CPU", 0)) for r in alive)
    if cpus == 2:  # two evaluators on half a CPU each (the interpreter leaves gaps), one CPU for compile tasks
        return Placement(2, dict(num_cpus=0.5), "CPUs (no GPU: Triton's interpreter)")
    return Placement(max(1, cpus - 1), dict(num_cpus=1), "CPUs (no GPU: Triton's interpreter)")


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
            ray.init(address="local", include_dashboard=False, num_gpus=num_gpus, **kwargs)
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
