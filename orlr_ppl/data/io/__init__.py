"""Readers for MIML data files; each returns a ``MIMLData`` and never drops anything silently.

* ``read_miml_arff``: relational ARFF (MIML / Mulan style), optionally with
  a Mulan XML file naming the labels (``arff``);
* ``read_bag_csv``: the HJA bag CSV layout, as published: features, bag
  labels, instance labels (-1: unlabelled) and an ``id<TAB>name`` class-names
  file (``read_class_names``), class ids mapped to indices by one documented
  rule (``bag_csv``);
* ``write_miml_arff``: the way back, to relational ARFF with a Mulan XML
  (``arff_writer``);
* ``read_bag_npz``: one ``.npz`` archive of named arrays, the command
  line's data files (``npz``);
* ``read_annotations``: instance labels given by hand, in the CSV file
  ``orlr-ppl query`` writes with its ``label`` column filled in (``annotations``).

Every malformed input raises ``ValueError`` naming the file and, where the
problem sits on one line, ``line N`` (line, field and instance numbers count
from 1), or for an archive the array. Each module's docstring documents its
format.
"""

from .annotations import read_annotations
from .arff import read_miml_arff
from .arff_writer import write_miml_arff
from .bag_csv import read_bag_csv, read_class_names
from .npz import read_bag_npz

__all__ = [
    "read_annotations",
    "read_bag_csv",
    "read_bag_npz",
    "read_class_names",
    "read_miml_arff",
    "write_miml_arff",
]
