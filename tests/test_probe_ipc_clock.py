"""benchmarks/probe_ipc_clock2.py, the issue-28 probe of the judge's GPU clocks: without a GPU it skips cleanly
(exit 0, one line), and its verdict is the rule its docstring states (nearly every run usable, a few us of noise,
an offset that does not move with the workload). The measurements themselves need the GPU."""

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch

PROBE = Path(__file__).resolve().parent.parent / "benchmarks" / "probe_ipc_clock2.py"


def probe_module():
    spec = importlib.util.spec_from_file_location("probe_ipc_clock2", PROBE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(torch.cuda.is_available(), reason="the skip is for machines without a GPU")
def test_without_a_gpu_it_says_so_in_one_line_and_exits_0(tmp_path):
    done = subprocess.run([sys.executable, str(PROBE), "--json", str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        "probe_ipc_clock2: skipped: needs a CUDA GPU (interprocess events, the driver's PTX loader)"]
    assert not (tmp_path / "out.json").exists()


META = {"device": "test", "torch": "-", "runs": 60, "globaltimer_ticks_ns": [32] * 8, "gate": "cuStreamWaitValue32",
        "out_of_time": False}


def rows(offset_us, noise_us, late_every=0, workload_shift_us=0.0):
    """One design's runs: child times of each workload, the design's = child + offset (+ a shift that grows
    with the workload's position) + noise; every `late_every`-th run unusable."""
    probe = probe_module()
    rng = random.Random(1)
    by_workload = {}
    for position, (name, _, launches) in enumerate(probe.WORKLOADS):
        runs = []
        for k in range(60):
            child_ms = 0.02 * launches + rng.gauss(0, 0.0005)
            shift = offset_us + position * workload_shift_us + rng.gauss(0, noise_us)
            runs.append({"k": k, "child_ms": child_ms, "design_ms": child_ms + shift / 1e3,
                         "late": bool(late_every) and k % late_every == 0})
        by_workload[name] = runs
    return by_workload


@pytest.mark.parametrize(("design", "works"), [
    (rows(4.0, 0.5), True),
    (rows(4.0, 0.5, workload_shift_us=3.0), False),  # the offset moves 9 us by the longest workload
    (rows(4.0, 8.0), False),  # noise past 5 us
    (rows(4.0, 0.5, late_every=10), False),  # 6 of 60 runs unusable
])
def test_the_verdict_is_the_stated_rule(tmp_path, capsys, design, works):
    import json

    probe = probe_module()
    probe.report({"poll": design}, META, str(tmp_path / "out.json"))
    verdict = json.loads((tmp_path / "out.json").read_text())["designs"]["poll"]["verdict"]
    assert verdict["works"] is works
    assert ("poll    -> WORKS" in capsys.readouterr().out) is works
