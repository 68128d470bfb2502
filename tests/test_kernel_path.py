"""scripts/test.sh's second pass really runs on the portable kernels it names (a variable misspelt or read too late
would silently repeat the native pass): PyTorch's dispatch at its default level, numba compiling for a generic CPU."""
import os
from pathlib import Path

import pytest
import torch

PORTABLE = os.environ.get("DIFFGEO_KERNEL_PATH") == "portable"   # a kernels module (tests/conftest.py)


@pytest.mark.skipif(not PORTABLE, reason="checks the portable kernel pass of scripts/test.sh (DIFFGEO_KERNEL_PATH=portable)")
def test_portable_pass_uses_portable_kernels():
    assert os.environ.get("ATEN_CPU_CAPABILITY") == "default"
    assert torch.backends.cpu.get_cpu_capability() == "DEFAULT"
    numba = pytest.importorskip("numba")
    assert numba.config.CPU_NAME == "generic"
    assert os.environ.get("MKL_CBWR") == "COMPATIBLE" and os.environ.get("ONEDNN_MAX_CPU_ISA") == "SSE41"



def test_every_listed_module_exists():
    "tests/conftest.py's KERNEL_MODULES names test modules that exist (a renamed one would silently leave the pass)."
    from conftest import KERNEL_MODULES
    here = {p.stem for p in Path(__file__).parent.glob("test_*.py")}
    assert KERNEL_MODULES <= here, sorted(KERNEL_MODULES - here)
