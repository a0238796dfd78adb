"""``python -m orlr_ppl.cli``: the ``orlr-ppl`` command."""

from .main import main

raise SystemExit(main())
