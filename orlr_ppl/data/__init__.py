"""Beside the layers, the data: the ``MIMLData`` container, file readers (``io``) and ``datasets``.

Depends only on ``dp.validation``, so every layer above can take a ``MIMLData``.
"""

from ._labels import UNLABELLED
from .container import MIMLData
from .union import BagProblem

__all__ = ["UNLABELLED", "BagProblem", "MIMLData"]
