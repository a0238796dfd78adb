"""Beside the layers, evaluation: ``metrics``, ``cross_validation`` and ``plots``."""
