"""A CPU `correct` says what it did not audit wherever it is shown: on the CPU, Triton's interpreter runs
the kernels inside the candidate's own process, so the judge checks the outputs but cannot see who
computed them (kgen.core.records.CPU_CORRECT). GPU verdicts read as before. (`kgen eval`'s line:
tests/test_eval_units.py::test_cli_human_summary.)"""

import json
import re

from kgen.core.records import CPU_CORRECT, EvalResult, verdict_label

from conftest import run_kgen


def test_the_label_of_a_cpu_correct_and_of_everything_else():
    assert verdict_label("correct", "cpu") == CPU_CORRECT == (
        "correct (CPU: outputs checked; who did the work not audited)")
    assert verdict_label("correct", "NVIDIA H100 80GB HBM3") == "correct"
    assert verdict_label("incorrect", "cpu") == "incorrect"
    assert verdict_label(None, None) == "not evaluated"


def test_the_leaderboard_says_it_of_its_cpu_rows_in_every_format(results):
    path, ids = results
    table = run_kgen("leaderboard", "--all", "--db", str(path))
    assert table.returncode == 0, table.stderr
    assert f"cpu rows: {CPU_CORRECT}" in table.stdout.splitlines()[0]  # piped: in the title line
    on_terminal = run_kgen("leaderboard", "--all", "--db", str(path),
                           env={"TTY_COMPATIBLE": "1", "COLUMNS": "80", "NO_COLOR": "1"}).stdout
    assert f"cpu rows: {CPU_CORRECT}" in " ".join(re.sub(r"\x1b\[[0-9;]*m", "", on_terminal).split())
    markdown = run_kgen("leaderboard", "--all", "--db", str(path), "--format", "markdown").stdout
    assert f"cpu rows: {CPU_CORRECT}" in markdown
    rows = json.loads(run_kgen("leaderboard", "--all", "--db", str(path), "--format", "json").stdout)
    verdicts = {r["candidate_id"]: r["verdict"] for r in rows}
    assert verdicts[ids["cpu_first"]] == CPU_CORRECT and verdicts[ids["softmax_best"]] == "correct"
    csv_text = run_kgen("leaderboard", "--all", "--db", str(path), "--format", "csv").stdout
    assert csv_text.splitlines()[0].endswith(",verdict") and CPU_CORRECT in csv_text
    gpu_only = run_kgen("leaderboard", "--device", "H100", "--db", str(path)).stdout
    assert "CPU:" not in gpu_only


def test_show_says_it_of_a_cpu_evaluation(results):
    path, ids = results
    shown = run_kgen("show", str(ids["cpu_first"]), "--db", str(path), env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    assert CPU_CORRECT in shown.stdout
    gpu = run_kgen("show", str(ids["softmax_best"]), "--db", str(path), env={"COLUMNS": "200"}).stdout
    assert "CPU:" not in gpu and "correct" in gpu


def test_shows_lineage_tree_says_it_of_a_cpu_parent(results):
    path, ids = results
    shown = run_kgen("show", str(ids["cpu_second"]), "--db", str(path), env={"COLUMNS": "300"})
    assert shown.returncode == 0, shown.stderr
    tree = shown.stdout[shown.stdout.index(f"lineage of {ids['cpu_second']}"):]
    assert f"{ids['cpu_first']}: round " in tree and CPU_CORRECT in " ".join(tree.split())
    gpu_child = run_kgen("show", str(ids["conv_hybrid"]), "--db", str(path), env={"COLUMNS": "300"}).stdout
    assert "CPU:" not in gpu_child[gpu_child.index("lineage of"):]


def test_an_untimed_collection_summary_says_it_of_its_correct_entries():
    from test_collection import hand_results

    from kgen.search.collection_summary import render, summarize

    results = hand_results()
    untimed = render(summarize(results, timed=False), results)
    assert CPU_CORRECT in untimed
    assert CPU_CORRECT not in render(summarize(results, timed=True), results)


def test_the_report_says_it_under_a_board_with_cpu_rows(results, tmp_path):
    from kgen.outputs.report import write_report
    from kgen.store.db import open_db

    path, _ = results
    db = open_db(str(path))
    try:
        html = write_report(db, tmp_path / "report.html").read_text()
    finally:
        db.close()
    assert f"cpu rows: {CPU_CORRECT}" in html


def test_the_search_progress_line_says_it():
    from kgen.search.progress import describe

    result = EvalResult(outcome="correct", device="cpu")
    assert describe(result) == CPU_CORRECT
