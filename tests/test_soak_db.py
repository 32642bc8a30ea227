"""The results DB under load (benchmarks/soak_db.py, issue 19): four CPU searches at once on one SQLite DB, a
reader running `kgen leaderboard` and `kgen runs` every second, one search SIGKILLed midway and resumed."""

import json
import subprocess
import sys

import pytest

from conftest import REPO


@pytest.mark.slow
def test_four_searches_a_reader_and_a_killed_search_on_one_db_lose_nothing(tmp_path):
    soak = subprocess.run([sys.executable, str(REPO / "benchmarks" / "soak_db.py"), "--searches", "4", "--rounds", "2",
                           "--candidates", "2", "--dir", str(tmp_path / "soak"), "--json"],
                          capture_output=True, text=True, timeout=1800)
    figures = json.loads(soak.stdout.splitlines()[-1])
    assert figures["problems"] == [] and soak.returncode == 0, figures
    assert figures["runs_finished"] == 4 and figures["killed_run"] is not None
    assert figures["evaluations"] == figures["candidates"] > 0  # one each: none lost, none twice
    assert figures["reader_calls"] > 0 and figures["reader_failures"] == 0
    assert figures["integrity_check"] == "ok"
    assert figures["write_transactions"] > 0  # the write waits were measured
