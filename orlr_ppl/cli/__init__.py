"""The ``orlr-ppl`` command line: demo, fit, predict, evaluate, info.

``main`` parses the arguments (``parser``) and runs a subcommand
(``commands``; the cross-validated comparison in ``compare``). Data come
from files in the field's formats or from named datasets (``sources``).
Every ``ValueError`` becomes one line on stderr and exit code 2.
"""

from .main import build_parser, main

__all__ = ["build_parser", "main"]
