"""Layer 3, inference on the model: ``em``, ``map``, ``nuts``, ``svi``; ``inference_data`` builds
an ArviZ ``xarray.DataTree`` (``InferenceData`` under 0.2x), ``diagnostics`` checks it, and ``sbc``
validates the sampler.

The modules are imported on use: ``nuts``, ``svi`` and ``diagnostics`` load ArviZ.
"""
