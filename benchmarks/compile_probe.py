"""Where CI's time goes: a pytest plugin that logs every XLA compile and persistent-cache hit, per test.

    rm -rf /tmp/probe && PYTHONPATH=benchmarks pytest -p compile_probe    # the suite, as CI runs it
    python benchmarks/compile_probe.py /tmp/probe                        # the summary

Each test worker appends one line per event to ``$COMPILE_PROBE_DIR/<pid>.tsv`` (default
``/tmp/probe``): the running test, ``compile`` or ``hit``, the program's name, seconds, and for
compiles over 0.3 s a hash of the program text (to find identical programs compiled twice).
Notebook kernels and command-line subprocesses are other processes and are not logged. The
summary prints the total compile seconds, the programs and tests that compiled longest, and the
seconds spent compiling programs that another test had already compiled.
"""

from __future__ import annotations

import collections
import hashlib
import os
import sys
import time
from pathlib import Path

OUT = Path(os.environ.get("COMPILE_PROBE_DIR", "/tmp/probe"))
_log = None


def _write(*fields: object) -> None:
    global _log
    if _log is None:
        OUT.mkdir(parents=True, exist_ok=True)
        _log = open(OUT / f"{os.getpid()}.tsv", "a", buffering=1)  # noqa: SIM115 (open for the process)
    test = os.environ.get("PYTEST_CURRENT_TEST", "-").split(" ")[0]
    _log.write("\t".join([test, *map(str, fields)]) + "\n")


def pytest_configure(config) -> None:  # noqa: ARG001 (pytest's hook signature)
    """Wrap JAX's compile and cache-read functions (private API: the probe is a measurement tool)."""
    import jax._src.compiler as compiler

    compile_and_load = compiler.backend_compile_and_load
    cache_read = compiler._cache_read

    def timed_compile(backend, module, *args, **kwargs):
        t0 = time.perf_counter()
        out = compile_and_load(backend, module, *args, **kwargs)
        seconds = time.perf_counter() - t0
        try:
            name = module.operation.attributes["sym_name"].value
        except Exception:  # noqa: BLE001 (a name is only a label)
            name = "?"
        digest = hashlib.sha1(str(module).encode()).hexdigest()[:10] if seconds > 0.3 else "-"
        _write("compile", name, f"{seconds:.3f}", digest)
        return out

    def timed_read(module_name, *args, **kwargs):
        t0 = time.perf_counter()
        out = cache_read(module_name, *args, **kwargs)
        if out[0] is not None:
            _write("hit", module_name, f"{time.perf_counter() - t0:.3f}", "-")
        return out

    compiler.backend_compile_and_load = timed_compile
    compiler._cache_read = timed_read


def summarise(directory: Path, top: int = 12) -> None:
    """Print totals and the longest-compiling programs and tests of a probe run."""
    events = []
    for path in sorted(directory.glob("*.tsv")):
        for line in path.read_text().splitlines():
            test, kind, name, seconds, digest = line.split("\t")[:5]
            events.append((test, kind, name, float(seconds), digest))
    compiles = [e for e in events if e[1] == "compile"]
    total = sum(e[3] for e in compiles)
    hits = sum(1 for e in events if e[1] == "hit")
    print(f"{len(compiles)} compiles, {total:.0f} s; {hits} persistent-cache hits")
    by_digest = collections.defaultdict(list)
    for e in compiles:
        if e[4] != "-":
            by_digest[e[4]].append(e[3])
    again = sum(sum(s) * (len(s) - 1) / len(s) for s in by_digest.values() if len(s) > 1)
    print(f"identical programs compiled again: {again:.0f} s")
    for title, key in (("program", lambda e: e[2]), ("test", lambda e: e[0].split("[")[0])):
        seconds, count = collections.Counter(), collections.Counter()
        for e in compiles:
            seconds[key(e)] += e[3]
            count[key(e)] += 1
        print(f"\nby {title}: seconds, compiles")
        for k, s in seconds.most_common(top):
            print(f"{s:8.1f} {count[k]:5d}  {k}")


if __name__ == "__main__":
    summarise(Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)
