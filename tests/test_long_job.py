"""scripts/long_job.sh: a long run parked at a session's end resumes in the next from the same commit, with its finished
cells and (with --checkpoints) its unfinished cell's checkpoint, after the machine's work folders are gone.

The script runs on a toy repository: a stub `diffgeo` whose one experiment records what it finds in its work folder and
adds a shard and a checkpoint, so that the round trip park -> wipe -> resume is checked without training anything."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TOY = '''
from pathlib import Path
class _Experiment:
    def main(self, profile, work_dir, executor, show, tag="", code_changed="recompute"):
        run = Path(work_dir) / "toy" / f"{profile}{'_' + tag if tag else ''}_0123abcd"
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        (Path(work_dir) / "code_changed.txt").write_text(code_changed)
        seen = sorted(str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()) if run.exists() else []
        Path(work_dir).mkdir(parents=True, exist_ok=True)
        (Path(work_dir) / "seen.txt").write_text("\\n".join(seen))
        (run / "checkpoints").mkdir(parents=True, exist_ok=True)
        if profile == "one":                        # a one-cell run: a checkpoint, no shards
            (run / "checkpoints" / "cell.pt").write_text("epoch 1"); return
        (run / "shards").mkdir(exist_ok=True)
        n = len(list((run / "shards").glob("*.nc")))
        (run / "shards" / f"cell-{n}.nc").write_text("shard")
        (run / "checkpoints" / "cell.pt").write_text(f"epoch {n}")
EXPERIMENT = _Experiment()
'''


def _git(cwd, *args):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def toy(tmp_path):
    "A git repository holding long_job.sh, a setup.sh that only puts this interpreter first, the stub package and a stub torch."
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "long_job.sh", repo / "scripts" / "long_job.sh")
    (repo / "scripts" / "setup.sh").write_text(f'export PATH="{Path(sys.executable).parent}:$PATH"\n')
    (repo / "diffgeo" / "experiments").mkdir(parents=True)
    (repo / "diffgeo" / "__init__.py").write_text("")
    (repo / "diffgeo" / "experiments" / "__init__.py").write_text("")
    (repo / "diffgeo" / "experiments" / "toy.py").write_text(TOY)
    (repo / "torch.py").write_text("def set_num_threads(n): pass\n")   # the job's own `import torch`, in milliseconds
    (repo / "results" / "in_progress").mkdir(parents=True)
    (repo / "results" / "in_progress" / "README.md").write_text("parked runs\n")
    _git(repo, "init", "-q"); _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "toy")
    return repo


def _job(repo, runs, *args):
    env = {**os.environ, "DIFFGEO_RUNS": str(runs)}
    return subprocess.run(["bash", str(repo / "scripts" / "long_job.sh"), *args], cwd=repo, env=env, capture_output=True,
                          text=True, timeout=300)


def _stopped(repo, runs, *args):
    "Run the toy job, then drop its log's DONE: a job stopped before it finished (the toy's own run always finishes)."
    r = _job(repo, runs, *args)
    log = runs / f"{args[-2]}_{args[-1]}.log"
    if log.exists(): log.write_text("".join(l for l in log.read_text().splitlines(True) if l.strip() != "DONE"))
    return r


def test_park_wipe_resume(toy, tmp_path):
    runs = tmp_path / "runs"
    first = _git(toy, "rev-parse", "HEAD")
    r = _stopped(toy, runs, "toy", "long")
    assert r.returncode == 0, r.stderr
    assert (runs / "work_toy_long" / "seen.txt").read_text() == ""                       # a fresh start
    r = _job(toy, runs, "--park", "toy", "long")                                           # shards only
    assert r.returncode == 0, r.stderr
    parked = toy / "results" / "in_progress" / "toy_long"
    assert sorted(p.name for p in parked.iterdir()) == ["SOURCE", "cell-0.nc"]
    r = _job(toy, runs, "--park", "--checkpoints", "toy", "long")                         # and the checkpoint
    assert r.returncode == 0, r.stderr
    assert (parked / "checkpoints" / "cell.pt").read_text() == "epoch 0"
    source = (parked / "SOURCE").read_text()
    assert f"commit {first}" in source and "sub-path toy/long_0123abcd/shards" in source and "checkpoint files 1" in source
    # the next session: a new commit on the repository, the machine's runs folder gone
    (toy / "later.txt").write_text("later")
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "later")
    shutil.rmtree(runs)
    r = _stopped(toy, runs, "toy", "long")
    assert r.returncode == 0, r.stderr
    assert "1 parked cells, 1 checkpoint files and 0 kept networks" in r.stdout
    assert (runs / "work_toy_long" / "seen.txt").read_text().split() == ["checkpoints/cell.pt", "shards/cell-0.nc"]
    assert _git(runs / "src_toy_long", "rev-parse", "HEAD") == first                      # the shards' code, not HEAD's


def test_reuse_resumes_with_head_and_keeps_saying_so(toy, tmp_path):
    "--reuse: a parked run resumes with HEAD's code, keeping the parked cells (code_changed='reuse'); the park records it, so "
    "the next plain resume keeps it; --reuse with nothing parked is refused."
    runs = tmp_path / "runs"
    r = _job(toy, runs, "--reuse", "toy", "long")
    assert r.returncode == 1 and "--reuse resumes a parked run" in r.stderr
    first = _git(toy, "rev-parse", "HEAD")
    assert _stopped(toy, runs, "toy", "long").returncode == 0
    assert (runs / "work_toy_long" / "code_changed.txt").read_text() == "recompute"
    assert _job(toy, runs, "--park", "--checkpoints", "toy", "long").returncode == 0
    parked = toy / "results" / "in_progress" / "toy_long"
    assert "code_changed" not in (parked / "SOURCE").read_text()
    (toy / "fix.txt").write_text("a fix")                                                  # the fix, committed
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "fix")
    fix = _git(toy, "rev-parse", "HEAD")
    shutil.rmtree(runs)
    r = _stopped(toy, runs, "toy", "long")                                                   # plain: the parked commit
    assert r.returncode == 0 and _git(runs / "src_toy_long", "rev-parse", "HEAD") == first, r.stderr
    r = _stopped(toy, runs, "--reuse", "toy", "long")
    assert r.returncode == 0, r.stderr
    assert _git(runs / "src_toy_long", "rev-parse", "HEAD") == fix
    assert (runs / "work_toy_long" / "code_changed.txt").read_text() == "reuse"
    assert _job(toy, runs, "--park", "--checkpoints", "toy", "long").returncode == 0
    source = (parked / "SOURCE").read_text()
    assert f"commit {fix}" in source and "code_changed reuse" in source
    shutil.rmtree(runs)
    r = _stopped(toy, runs, "toy", "long")                                                   # the next session, no flag
    assert r.returncode == 0 and (runs / "work_toy_long" / "code_changed.txt").read_text() == "reuse", r.stderr


def test_refusals(toy, tmp_path):
    runs = tmp_path / "runs"
    r = _job(toy, runs, "--park", "toy", "long")
    assert r.returncode == 1 and "no run of toy long" in r.stderr
    r = _job(toy, runs, "toy")
    assert r.returncode == 2 and "usage" in r.stderr
    assert _stopped(toy, runs, "toy", "long").returncode == 0
    big = next((runs / "work_toy_long").rglob("checkpoints")) / "big.pt"
    with open(big, "wb") as f: f.truncate(21 * 2**20)                                       # over the 20 MB limit
    r = _job(toy, runs, "--park", "--checkpoints", "toy", "long")
    assert r.returncode == 1 and "over 20 MB" in r.stderr
    big.unlink()
    other = runs / "work_toy_long" / "toy" / "long_ffffffff"                                 # another settings' run folder
    other.mkdir()
    r = _job(toy, runs, "--park", "toy", "long")
    assert r.returncode == 1 and "more than one run" in r.stderr
    other.rmdir()
    with open(runs / "toy_long.log", "a") as f: f.write("DONE\n")                          # finished: land, do not park
    r = _job(toy, runs, "--park", "toy", "long")
    assert r.returncode == 1 and "land_run.sh" in r.stderr
    parked = toy / "results" / "in_progress" / "toy_long"
    assert not parked.exists()                                                               # the refusals parked nothing
    parked.mkdir(); (parked / "SOURCE").write_text("cells 3 done\n")                        # a SOURCE without its lines
    r = _stopped(toy, runs, "toy", "long")
    assert r.returncode == 1 and "lacks its 'commit' or 'sub-path'" in r.stderr


def test_one_cell_run(toy, tmp_path):
    "A one-cell run has checkpoints and no shards: plain --park refuses, --park --checkpoints keeps the checkpoint, and a "
    "later plain --park of a sweep drops parked checkpoints."
    runs = tmp_path / "runs"
    assert _stopped(toy, runs, "toy", "one").returncode == 0
    r = _job(toy, runs, "--park", "toy", "one")
    assert r.returncode == 1 and "--park --checkpoints" in r.stderr
    r = _job(toy, runs, "--park", "--checkpoints", "toy", "one")
    assert r.returncode == 0, r.stderr
    parked = toy / "results" / "in_progress" / "toy_one"
    assert "cells 0 done" in (parked / "SOURCE").read_text() and (parked / "checkpoints" / "cell.pt").exists()
    shutil.rmtree(runs)
    r = _stopped(toy, runs, "toy", "one")
    assert r.returncode == 0 and "0 parked cells, 1 checkpoint files" in r.stdout, r.stderr
    assert (runs / "work_toy_one" / "seen.txt").read_text().split() == ["checkpoints/cell.pt"]
    # a sweep parked with its checkpoints, then without: the stale checkpoints are not restored
    assert _stopped(toy, runs, "toy", "long").returncode == 0
    assert _job(toy, runs, "--park", "--checkpoints", "toy", "long").returncode == 0
    assert _job(toy, runs, "--park", "toy", "long").returncode == 0
    assert not (toy / "results" / "in_progress" / "toy_long" / "checkpoints").exists()


def test_land_refuses_unfinished(tmp_path):
    "scripts/land_run.sh lands only a run whose log ends with DONE."
    runs = tmp_path / "runs"; runs.mkdir()
    (runs / "toy_long.log").write_text("epoch 3 of 30\n")
    env = {**os.environ, "DIFFGEO_RUNS": str(runs)}
    for log in (True, False):
        if not log: (runs / "toy_long.log").unlink()
        r = subprocess.run(["bash", str(ROOT / "scripts" / "land_run.sh"), "toy", "long"], env=env, capture_output=True, text=True)
        assert r.returncode == 1 and "has not finished" in r.stderr


def test_resume_in_a_clone_older_than_the_commit(toy, tmp_path):
    "The runs folder survived the session but its clone predates the parked commit: the job fetches it, not fails."
    runs = tmp_path / "runs"
    assert _stopped(toy, runs, "toy", "long").returncode == 0                             # clones the first commit
    (toy / "later.txt").write_text("later")
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "later")
    later = _git(toy, "rev-parse", "HEAD")
    parked = toy / "results" / "in_progress" / "toy_long"
    parked.mkdir()
    (parked / "SOURCE").write_text(f"commit {later}\nsub-path toy/long_0123abcd/shards\ncells 0 done\n")
    r = _stopped(toy, runs, "toy", "long")
    assert r.returncode == 0, r.stderr
    assert _git(runs / "src_toy_long", "rev-parse", "HEAD") == later


def test_a_tagged_variant_is_named_apart_parked_and_resumed(toy, tmp_path):
    "long_job.sh EXPERIMENT PROFILE TAG: a declared variant (Experiment.variant) gets its own log, work, parked folder and run folder."
    runs = tmp_path / "runs"
    r = _job(toy, runs, "toy", "long", "steps")
    assert r.returncode == 0, r.stderr
    log = runs / "toy_long_steps.log"
    log.write_text("".join(l for l in log.read_text().splitlines(True) if l.strip() != "DONE"))   # stopped, not finished
    assert (runs / "work_toy_long_steps" / "toy" / "long_steps_0123abcd" / "shards").is_dir()
    assert not (runs / "work_toy_long").exists()                                             # the untagged run is untouched
    r = _job(toy, runs, "--park", "--checkpoints", "toy", "long", "steps")
    assert r.returncode == 0, r.stderr
    parked = toy / "results" / "in_progress" / "toy_long_steps"
    assert "sub-path toy/long_steps_0123abcd/shards" in (parked / "SOURCE").read_text()
    shutil.rmtree(runs)
    r = _job(toy, runs, "toy", "long", "steps")
    assert r.returncode == 0 and "1 parked cells, 1 checkpoint files" in r.stdout, r.stderr
    r = _job(toy, runs, "toy", "long", "steps", "extra")
    assert r.returncode == 2 and "usage" in r.stderr


def test_the_networks_finished_cells_kept_are_parked_and_restored(toy, tmp_path):
    "A finished cell is not trained again on resume, so the networks it kept (zoo/NAME in the job's checkout) travel with the park."
    runs = tmp_path / "runs"
    r = _stopped(toy, runs, "toy", "long")
    assert r.returncode == 0, r.stderr
    kept = runs / "src_toy_long" / "zoo" / "toy_long"
    kept.mkdir(parents=True); (kept / "Net_seed0.pt").write_text("weights")            # what the finished cell kept
    r = _job(toy, runs, "--park", "toy", "long")
    assert r.returncode == 0, r.stderr
    parked = toy / "results" / "in_progress" / "toy_long"
    assert (parked / "zoo" / "Net_seed0.pt").read_text() == "weights" and "kept networks 1" in (parked / "SOURCE").read_text()
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "add", "-A")
    _git(toy, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "parked")
    shutil.rmtree(runs)                                                                    # the next session: the machine's folder gone
    r = _stopped(toy, runs, "toy", "long")
    assert r.returncode == 0, r.stderr
    assert "1 kept networks" in r.stdout and (kept / "Net_seed0.pt").read_text() == "weights"
