"""Named datasets: Letter Frost, HJA birdsong, MIML digits, and the published figures.

The public names of ``orlr_ppl.data.datasets``, as a module of its own.
"""

from .data.datasets import (  # noqa: F401
    PUBLISHED_HJA,
    PUBLISHED_LETTER_FROST,
    DigitPools,
    hja_version,
    load_hja,
    load_letter_frost,
    make_miml_digits,
    published_figures,
    read_uci_letters,
    split_pools,
)

__all__ = [
    "DigitPools",
    "PUBLISHED_HJA",
    "PUBLISHED_LETTER_FROST",
    "hja_version",
    "load_hja",
    "load_letter_frost",
    "make_miml_digits",
    "published_figures",
    "read_uci_letters",
    "split_pools",
]
