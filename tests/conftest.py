import os
import sys

import jax
import pytest
from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.dirname(__file__))
# Tests write no compilation cache under the user's home (the command line and
# the notebook would switch it on); test_compilation_cache sets its own.
os.environ.setdefault("ORLR_PPL_COMPILATION_CACHE", "0")

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
    10-fold run ran out of memory maps in before (BENCHMARKS.md, issue 4).
    """
    yield
    jax.clear_caches()


DTYPES = ["float32", "float64"]
TOL = {"float32": 1e-4, "float64": 1e-10}


def precision(dtype: str):
    """Context running JAX in ``dtype`` (float64 enables ``jax_enable_x64``)."""
    return jax.enable_x64(dtype == "float64")
