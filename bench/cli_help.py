"""Benchmark how long the `diffgeo` command takes to answer `--help` (issue 35: it took 9-10 s; target <= 2 s).

Usage:

    python bench/cli_help.py                # best of 3
    python bench/cli_help.py --repeats 5

Three timings, each the best wall-clock time of --repeats fresh interpreters (subprocesses, so imports are not cached
in-process; the OS file cache is warm after the first), in one process run:

- floor:            `python -c "import sys"`, the interpreter's own start-up;
- --help:           `python -m diffgeo.cli --help`;
- stability --help: `python -m diffgeo.cli stability --help`, whose text lists the architectures and data sets.

Printed: seconds for each, the ratio to the floor, and the CPU model (lscpu's Model name).
"""
import argparse
import os
import subprocess
import sys
import time

from _common import cpu_model   # (imports torch here, in the timing process; the timed commands are fresh processes)

COMMANDS = {"floor": ["-c", "import sys"],
            "--help": ["-m", "diffgeo.cli", "--help"],
            "stability --help": ["-m", "diffgeo.cli", "stability", "--help"]}


def best(args, repeats):
    "Best wall-clock seconds of `repeats` runs of `python *args`, each checked to succeed."
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, *args], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3, help="runs of each command; the best is kept")
    a = p.parse_args()
    t = {name: best(args, a.repeats) for name, args in COMMANDS.items()}
    print(f"CPU: {cpu_model()}, {os.cpu_count()} hardware threads (each command one process);  python {sys.version.split()[0]};  "
          f"best of {a.repeats}")
    for name, s in t.items():
        print(f"{name:18s} {s:7.3f} s   {s / t['floor']:6.1f}x floor")
    worst = max(t["--help"], t["stability --help"])
    print(f"slowest help: {worst:.3f} s (target <= 2 s: {'met' if worst <= 2 else 'NOT met'})")


if __name__ == "__main__":
    main()
