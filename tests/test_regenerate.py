"""scripts/regenerate.py (issue 61): the committed cpu datasets computed again by today's code, compared with the files."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = [sys.executable, str(ROOT / "scripts" / "regenerate.py")]


def test_it_lists_every_committed_cpu_dataset_with_its_settings():
    r = subprocess.run(SCRIPT + ["--list"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert any(l.startswith("petrini_fig1: petrini_fig1, profile cpu (committed from") for l in lines)
    assert any(l.startswith("petrini_fig5_seed1: petrini_fig5, profile cpu, tag seed1, settings {'seeds': [1]}") for l in lines)
    assert not any(l.startswith("petrini_fig5_long") for l in lines)   # long and paper datasets stay


def test_an_unknown_name_is_refused_with_the_list():
    r = subprocess.run(SCRIPT + ["petrini_fig99", "--list"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2 and "no committed cpu dataset ['petrini_fig99']" in r.stderr and "petrini_fig1" in r.stderr


def test_a_dataset_computed_again_is_compared_variable_by_variable(tmp_path):
    r = subprocess.run(SCRIPT + ["petrini_fig1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=900,
                       env={**__import__("os").environ, "DIFFGEO_PROGRESS": "0"})
    assert r.returncode == 0, r.stderr[-3000:]
    table = (tmp_path / "regenerate.md").read_text().splitlines()
    assert table[0].startswith("| dataset | minutes | variables | largest relative difference | NaNs moved |")
    row = table[2].split(" | ")
    assert row[0] == "| petrini_fig1" and row[4] == "0" and row[5] == "–", table[2]   # no NaN moved, no variable lost
    assert (tmp_path / "petrini_fig1" / "results" / "petrini_fig1.nc").is_file()
    assert "panel" in (tmp_path / "regenerate.csv").read_text()
