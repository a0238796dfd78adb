"""``set_host_device_count``: several JAX CPU devices, so that NUTS chains run in parallel."""

from __future__ import annotations

import os
import warnings

MIN_DEVICES = 4
"""The default chain count: more devices than cores still interleave the chains' work, which beats
running them one after another."""
MAX_DEVICES = 8


def set_host_device_count(n: int | None = None) -> int:
    """Expose ``n`` CPU devices to JAX, so that NUTS runs up to ``n`` chains in parallel; returns ``n``.

    JAX shows a CPU as one device unless ``XLA_FLAGS`` asks for more before
    its backend starts, and chains run in parallel only over devices (as
    ``numpyro.set_host_device_count``). Call it first, before any JAX
    computation; arrays and single-device work stay on device 0. The CLI
    calls it. ``n=None``: one device per core, at least ``MIN_DEVICES`` (the
    default chain count) and at most ``MAX_DEVICES``.

    A count set in ``XLA_FLAGS`` already is left alone (and returned); after
    JAX has started the call cannot take effect, and warns.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" in flags:
        return int(flags.split("xla_force_host_platform_device_count=")[1].split()[0])
    count = min(max(os.cpu_count() or 1, MIN_DEVICES), MAX_DEVICES) if n is None else int(n)
    if count < 1:
        raise ValueError(f"set_host_device_count({n}): give a positive device count")
    from jax._src import xla_bridge  # JAX's own test of whether its backends exist yet

    if getattr(xla_bridge, "backends_are_initialized", lambda: True)():
        warnings.warn(
            "set_host_device_count: JAX has already started, so its device count is fixed; call it "
            "before any JAX computation (first thing after the imports)",
            RuntimeWarning,
            stacklevel=2,
        )
        return count
    os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()
    return count
