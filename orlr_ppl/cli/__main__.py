"""``python -m orlr_ppl.cli``: the ``orlr-ppl`` command."""

from .main import run

run()
