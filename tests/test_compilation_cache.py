"""The persistent compilation cache: the command line fills it, and 0 opts out."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from orlr_ppl.compilation_cache import ENV, MIN_SECS_ENV, default_cache_dir
from orlr_ppl.data.datasets import make_miml_digits


def _fit(tmp_path, cache_setting: str, min_secs: str = "0") -> subprocess.CompletedProcess:
    ds = make_miml_digits(20, seed=0, split="train", max_size=4)
    labels = np.zeros((len(ds.bags), 10), int)
    for i, s in enumerate(ds.label_sets):
        labels[i, s] = 1
    data = tmp_path / "train.npz"
    bag_ids = np.concatenate([np.full(len(b), i) for i, b in enumerate(ds.bags)])
    np.savez(data, features=np.concatenate(ds.bags), bag_ids=bag_ids, bag_labels=labels)
    # Every program is written: the default threshold (1 s of compiling) would make the test depend
    # on how fast this machine compiles the MAP's gradient.
    env = {**os.environ, ENV: cache_setting, MIN_SECS_ENV: min_secs, "JAX_LOG_COMPILES": "0"}
    args = ["fit", "--data", str(data), "--method", "map", "--out", str(tmp_path / "model")]
    script = f"import sys; from orlr_ppl.cli.main import main; sys.exit(main({args!r}))"
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env)


def test_the_command_line_writes_the_cache_and_zero_opts_out(tmp_path):
    cache = tmp_path / "cache"
    run = _fit(tmp_path, str(cache))
    assert run.returncode == 0, run.stderr
    assert cache.is_dir() and any(cache.iterdir())

    off = tmp_path / "off"
    off.mkdir()
    run = _fit(off, "0")
    assert run.returncode == 0, run.stderr
    assert not (off / "0").exists() and sorted(p.name for p in off.iterdir()) == ["model", "train.npz"]


def test_the_threshold_is_read_from_the_environment_and_checked(monkeypatch, tmp_path):
    import jax

    from orlr_ppl.compilation_cache import enable_compilation_cache

    before = jax.config.jax_compilation_cache_dir, jax.config.jax_persistent_cache_min_compile_time_secs
    try:
        monkeypatch.setenv(MIN_SECS_ENV, "2.5")
        assert enable_compilation_cache(tmp_path) == tmp_path
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 2.5
        monkeypatch.setenv(MIN_SECS_ENV, "soon")
        with pytest.raises(ValueError, match=f"{MIN_SECS_ENV}='soon': give a number of seconds"):
            enable_compilation_cache(tmp_path)
    finally:  # the rest of the run keeps conftest's cache
        if before[0] is None:
            jax.config.update("jax_compilation_cache_dir", None)
        else:
            enable_compilation_cache(*before)


def test_a_malformed_threshold_is_one_line_and_exit_code_2_on_the_command_line(tmp_path):
    run = _fit(tmp_path, str(tmp_path / "cache"), min_secs="soon")
    assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr
    assert run.stderr.strip().splitlines()[-1].startswith(f"orlr-ppl fit: error: {MIN_SECS_ENV}='soon'")


def test_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert default_cache_dir() == tmp_path / "orlr-ppl" / "jax"
