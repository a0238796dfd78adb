"""Checks of a fit: ``diagnostics`` (R-hat, ESS, divergences, k-hat; point fits' stops) and
simulation-based calibration of the sampler (``sbc``, ``sbc_stats``, ``sbc_plot``).
"""
