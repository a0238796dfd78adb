"""Beside the layers, the data: the ``MIMLData`` container, file readers (``io``) and ``datasets``.

Depends only on ``dp.validation``, so every layer above can take a ``MIMLData``.
"""

from .container import BagProblem, MIMLData, Standardizer

__all__ = ["BagProblem", "MIMLData", "Standardizer"]
