import os
import sys

import jax
import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))
# One persistent compilation cache for the run, never under the user's home: each module's
# programs are freed when it ends (below), and the next module, the other xdist worker (which
# inherits this environment) or a notebook's kernel that compiles the same program loads it
# instead. JAX keys entries by program, JAX version and device, so results cannot change; only
# compile time is saved. .pytest_cache is git-ignored, so CI's clean clone starts it empty.
# test_compilation_cache sets its own; ORLR_PPL_COMPILATION_CACHE=0 turns this off.
os.environ.setdefault(
    "ORLR_PPL_COMPILATION_CACHE",
    os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".pytest_cache", "jax"),
)

from orlr_ppl import set_host_device_count  # noqa: E402
from orlr_ppl.compilation_cache import enable_compilation_cache  # noqa: E402

# Four CPU devices, as a user's session gets from set_host_device_count(): NUTS's four chains run in
# parallel (pmap), and the tests of the parallel driver have devices to run on.
set_host_device_count(4)
enable_compilation_cache(min_compile_time_secs=0.0)

settings.register_profile(
    "ci", deadline=None, max_examples=60, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile("ci")


@pytest.fixture(autouse=True, scope="module")
def _compiled_programs_freed_after_each_module():
    """Clear JAX's caches when a test module ends.

    A test worker runs half the suite in one process, and JAX keeps every program it compiled.
    Now that fits reuse programs (canonical shapes), nothing clears them along the way, and a
    worker crashed inside an XLA compile (segmentation fault) late in a CI run: the state a long
    10-fold run ran out of memory maps in before (BENCHMARKS.md, "The Letter Frost comparison").
    """
    yield
    jax.clear_caches()


@pytest.fixture(autouse=True)
def _no_layout_recalled_from_another_test(monkeypatch):
    """Each test packs canonically as a fresh process would (``dp.packing.canonical_layout``)."""
    from orlr_ppl.dp import packing

    monkeypatch.setattr(packing, "_recalled", [])


DTYPES = ["float32", "float64"]
TOL = {"float32": 1e-4, "float64": 1e-10}


def precision(dtype: str):
    """Context running JAX in ``dtype`` (float64 enables ``jax_enable_x64``)."""
    return jax.enable_x64(dtype == "float64")
