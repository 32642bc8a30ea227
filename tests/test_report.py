"""`kgen report`: one self-contained HTML page with the leaderboard and matplotlib plots; a CPU-only
DB says it has no timings instead of drawing empty plots; rendered in headless Chromium when present."""

import base64
import re
import shutil
import subprocess

import pytest

from conftest import REPO, run_kgen

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def embedded_pngs(page: str) -> list[bytes]:
    return [base64.b64decode(b) for b in re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)]


def test_the_report_is_one_self_contained_page_with_the_board_and_three_plots(results, tmp_path):
    path, ids = results
    out = tmp_path / "report.html"
    r = run_kgen("report", "-o", str(out), "--db", str(path))
    assert r.returncode == 0 and r.stdout.strip() == f"wrote {out}", r.stderr
    page = out.read_text()
    pngs = embedded_pngs(page)
    assert len(pngs) == 3 and all(p.startswith(PNG_MAGIC) and len(p) > 10_000 for p in pngs)
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from elsewhere
    for heading in ("Leaderboard", "Runs", "Best speedup after each round", "Outcomes per round",
                    "Runtime against % of roofline"):
        assert f"<h2>{heading}</h2>" in page
    board = page.split("<h2>Leaderboard</h2>")[1].split("<h2>")[0]
    assert [int(x) for x in re.findall(r'<tr><td class="num">(\d+)</td>', board)] == [
        ids["conv_best"], ids["softmax_best"], ids["cpu_first"]]
    assert "Not shown: run 3, evaluated without a GPU (no timings)." in page


def test_a_cpu_only_run_says_it_has_no_timings_instead_of_empty_plots(results, tmp_path):
    path, ids = results
    out = tmp_path / "cpu.html"
    assert run_kgen("report", "--run", str(ids["cpu_run"]), "-o", str(out), "--db", str(path)).returncode == 0
    page = out.read_text()
    assert len(embedded_pngs(page)) == 1  # the outcomes; speedups and runtimes need timings
    assert page.count("No timings:") == 2 and "evaluated without a GPU" in page


def test_the_problem_filter_keeps_to_that_problem(results, tmp_path):
    path, ids = results
    out = tmp_path / "conv.html"
    assert run_kgen("report", "--problem", "conv2d", "-o", str(out), "--db", str(path)).returncode == 0
    page = out.read_text()
    assert "kgen report: conv2d" in page and "run 2: conv2d" not in page  # titles live in the PNGs
    runs = page.split("<h2>Runs</h2>")[1].split("<h2>")[0]
    assert re.findall(r'<tr><td class="num">(\d+)</td>', runs) == [str(ids["conv_run"])]


@pytest.mark.parametrize("args,needle", [(["--run", "99"], "no run 99"),
                                         (["--problem", "matmul"], "nothing for problem 'matmul'"),
                                         (["-o", "missing/r.html"], "does not exist")])
def test_bad_filters_give_one_line_and_exit_2(results, args, needle):
    path, _ = results
    r = run_kgen("report", *args, "--db", str(path))
    assert r.returncode == 2 and needle in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(not (shutil.which("chromium") or shutil.which("chromium-browser")),
                    reason="no chromium (apt-get install -y chromium) to render the report")
def test_the_report_renders_in_headless_chromium(results, tmp_path):
    from PIL import Image

    path, _ = results
    page = tmp_path / "report.html"
    assert run_kgen("report", "-o", str(page), "--db", str(path)).returncode == 0
    png = tmp_path / "report.png"
    r = subprocess.run([str(REPO / "scripts" / "render_report.sh"), str(page), str(png), "1400x3000"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    image = Image.open(png).convert("L")
    assert image.size == (1400, 3000)
    # the three plots and the tables: well over a page of non-white pixels, and white margins
    dark = sum(image.histogram()[:200])
    assert dark > 50_000 and image.getpixel((5, 5)) > 250
