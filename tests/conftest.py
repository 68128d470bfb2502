"""Shared pytest setup for the diffgeo tests: quiet progress bars, few threads, deterministic hypothesis runs, and the
one list of the numerical test modules that scripts/test.sh runs a second time under a second CPU kernel path."""
import os

import numpy as np
import pytest

os.environ.setdefault("DIFFGEO_PROGRESS", "0")  # no tqdm bars in test output

import torch
from hypothesis import HealthCheck, settings

# one torch thread per pytest-xdist worker (scripts/test.sh runs two), else up to two
torch.set_num_threads(1 if os.environ.get("PYTEST_XDIST_WORKER") else min(2, os.cpu_count() or 1))

#: The test modules whose results depend on which CPU kernels compute them (SIMD reductions, BLAS, oneDNN, numba's
#: code): scripts/test.sh runs them again (`pytest -m kernels`) with PyTorch's, numba's, MKL's and oneDNN's dispatch
#: forced to their portable paths, so that a tolerance that only one CPU's kernels meet fails on the developer's machine.
KERNEL_MODULES = {"test_cpab", "test_diffeo", "test_distort", "test_exp_detlefsen_fig4", "test_exp_moskalev", "test_flows",
                  "test_hardening", "test_invariance", "test_kernel_path", "test_map_contract", "test_maps", "test_models",
                  "test_riemann", "test_stability", "test_stripe", "test_transformers"}


def pytest_configure(config):
    config.addinivalue_line("markers", "kernel_free: a test of a KERNEL_MODULES module whose outcome no CPU kernel decides "
                            "(names, imports, resume logic): scripts/test.sh's portable pass skips it")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.stem in KERNEL_MODULES: item.add_marker(pytest.mark.kernels)

# "default": a fixed, modest number of examples and derandomized, so that the suite is fast and every run
# draws the same examples; "thorough": many fresh random examples, for a hunt (DIFFGEO_HYPOTHESIS_PROFILE=thorough).
settings.register_profile("default", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("DIFFGEO_HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same global random state, whatever ran before it: a draw from the unseeded global
    generator made one CPAB test fail on one CI run in many (a rare bad point, since fixed, but the run must repeat)."""
    torch.manual_seed(0)
    np.random.seed(0)
