"""Reading and writing the field's files: MIML ARFF with Mulan XML, bag CSV, npz; hand-given instance labels.

The public names of ``orlr_ppl.data.io``, as a module of its own.
"""

from .data.io import (  # noqa: F401
    read_annotations,
    read_bag_csv,
    read_bag_npz,
    read_class_names,
    read_miml_arff,
    write_miml_arff,
)

__all__ = [
    "read_annotations",
    "read_bag_csv",
    "read_bag_npz",
    "read_class_names",
    "read_miml_arff",
    "write_miml_arff",
]
