"""``random_state`` to a seed, one rule for every estimator and feature map.

``None`` means seed 0, so that a fit with the defaults repeats exactly (the papers' tables, the
tests, a notebook rerun). scikit-learn reads ``None`` as fresh randomness; here pass a new int for
that, e.g. ``int(numpy.random.SeedSequence().entropy % 2**32)``.
"""

from __future__ import annotations

DEFAULT_SEED = 0
"""The seed ``random_state=None`` stands for."""


def seed_of(random_state: int | None) -> int:
    """The int seed of ``random_state`` (``DEFAULT_SEED`` for None)."""
    return DEFAULT_SEED if random_state is None else int(random_state)
