"""JAX's persistent compilation cache: compiled programs kept on disk between processes.

Compiling the sampler and the DP's gradient is most of the fixed cost of a fit. The ``orlr-ppl``
command line switches this cache on, and the notebooks do in their first cell,
so that a second process fitting data of the same shape family loads the
programs instead of compiling them. JAX keys each entry by the program, the
JAX version and the device, so a stale entry is never used.

Where: ``$ORLR_PPL_COMPILATION_CACHE`` if set to a path, else
``$XDG_CACHE_HOME/orlr-ppl/jax`` (``~/.cache/orlr-ppl/jax``). Opt out with
``ORLR_PPL_COMPILATION_CACHE=0``. ``$ORLR_PPL_COMPILATION_CACHE_MIN_SECS`` (default
1) is how long a program must have taken to compile to be written.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax

ENV = "ORLR_PPL_COMPILATION_CACHE"
MIN_SECS_ENV = "ORLR_PPL_COMPILATION_CACHE_MIN_SECS"
_OFF = {"0", "off", "false", "no"}


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/orlr-ppl/jax``, or ``~/.cache/orlr-ppl/jax``."""
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "orlr-ppl" / "jax"


def enable_compilation_cache(
    path: str | Path | None = None, min_compile_time_secs: float | None = None
) -> Path | None:
    """Switch JAX's persistent compilation cache on for this process.

    Args:
        path: the cache directory; None reads ``$ORLR_PPL_COMPILATION_CACHE``
            (a path, or ``0`` to opt out) and falls back to ``default_cache_dir()``.
        min_compile_time_secs: only programs that took at least this long to
            compile are written (small ones are cheaper to recompile than to read);
            None reads ``$ORLR_PPL_COMPILATION_CACHE_MIN_SECS``, else 1 s.
    Returns:
        The directory in use, or None when opted out or when the directory
        cannot be created (a warning says so; fits still work, uncached).
    """
    setting = os.environ.get(ENV, "").strip()
    if min_compile_time_secs is None:
        given = os.environ.get(MIN_SECS_ENV, "").strip() or "1"
        try:
            min_compile_time_secs = float(given)
        except ValueError:
            raise ValueError(f"{MIN_SECS_ENV}={given!r}: give a number of seconds, e.g. 1") from None
    if path is None and setting.lower() in _OFF:
        return None
    directory = Path(path or setting or default_cache_dir()).expanduser()
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        warnings.warn(
            f"JAX compilation cache not enabled: cannot create {directory} ({err}); "
            f"set {ENV} to a writable directory, or to 0 to silence this",
            RuntimeWarning,
            stacklevel=2,
        )
        return None
    jax.config.update("jax_compilation_cache_dir", str(directory))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", float(min_compile_time_secs))
    # JAX decides once per process whether a cache is in use; make it decide again. The hook is
    # private: without it (another JAX), the cache still works when enabled before any compile.
    try:
        from jax._src.compilation_cache import reset_cache
    except ImportError:
        return directory
    reset_cache()
    return directory
