"""Helpers shared by the benchmark scripts: loading the authors' reference code, and timing."""
import os
import sys
import time

import torch


def load_reference(path, script):
    "Import `diff.py` of a clone of pcsl-epfl/diffeomorphism kept outside this repository, or exit with how to get it."
    msg = ("The reference implementation is needed: clone it OUTSIDE this repository,\n"
           "    git clone https://github.com/pcsl-epfl/diffeomorphism /path/to/diffeomorphism\n"
           f"then run  python bench/{script} --ref /path/to/diffeomorphism  (or set DIFFEO_REF).")
    if not path: sys.exit("No reference given.\n" + msg)
    sys.path.insert(0, os.path.abspath(path))
    try:
        import diff
    except ImportError as e:
        sys.exit(f"Could not import diff.py from {path!r} ({e}).\n" + msg)
    if os.path.dirname(os.path.realpath(diff.__file__)) != os.path.realpath(path):
        sys.exit(f"'import diff' found {diff.__file__}, not {path}/diff.py.\n" + msg)
    return diff


def cpu_model() -> str:
    "The CPU's model name (/proc/cpuinfo), 'unknown' where it is not found."
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return "unknown"


def machine(device="cpu") -> str:
    "The line every benchmark prints first: torch's version and thread count, the CPU model, and the GPU where one is used."
    gpu = f", GPU: {torch.cuda.get_device_name()}" if str(device).startswith("cuda") and torch.cuda.is_available() else ""
    return f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU: {cpu_model()}{gpu}"


def best_time(fn, repeats):
    "Best wall-clock time of `repeats` calls of `fn` after one warm-up call (CUDA synchronised)."
    return best_times([fn], repeats)[0]


def best_times(fns, repeats):
    """Best wall-clock time of each of `fns` over `repeats` rounds, calling them in turn within each round (after one
    warm-up call each; CUDA synchronised), so that all see the same machine state."""
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    for fn in fns: fn()
    best = [float("inf")] * len(fns)
    for _ in range(repeats):
        for i, fn in enumerate(fns):
            sync(); t0 = time.perf_counter()
            fn()
            sync(); best[i] = min(best[i], time.perf_counter() - t0)
    return best
