"""On import: several JAX CPU devices, so NUTS chains run in parallel."""

from __future__ import annotations

import os as _os

MIN_DEVICES = 4


def expose_host_cores() -> None:
    """Let NUTS run its chains in parallel over the CPU cores (``numpyro.set_host_device_count``).

    JAX shows a CPU as one device unless ``XLA_FLAGS`` asks for more before its
    backend starts, and NumPyro runs chains in parallel only over devices. So,
    on import, when the backend has not started and the user set no device
    count, ask for one device per core, but at least ``MIN_DEVICES`` (the
    default chain count: more devices than cores still interleave the chains'
    work, which beats running them one after another) and at most 8. Arrays
    and single-device work stay on device 0. Opt out with
    ``ORLR_PPL_HOST_DEVICES=0``; an integer sets the count.
    """
    wanted = _os.environ.get("ORLR_PPL_HOST_DEVICES", "auto")
    flags = _os.environ.get("XLA_FLAGS", "")
    if wanted == "0" or "xla_force_host_platform_device_count" in flags:
        return
    from jax._src import xla_bridge

    if getattr(xla_bridge, "backends_are_initialized", lambda: True)():
        return  # too late: the count is fixed once JAX has started
    count = min(max(_os.cpu_count() or 1, MIN_DEVICES), 8) if wanted == "auto" else int(wanted)
    _os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


expose_host_cores()
