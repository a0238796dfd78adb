"""Layer 3, inference on the model, by what it computes.

``methods``: the settings objects (``EM``, ``MAP``, ``Laplace``, ``NUTS``, ``SVI``). ``point``: the
posterior mode (``map``, ``em``). ``posterior``: the Laplace approximation, NUTS, SVI and the
posterior object they build. ``streaming``: fits on minibatches from a store on disk. ``checks``:
the diagnostics of a fit and simulation-based calibration of the sampler.

The modules are imported on use: ``posterior.nuts``, ``posterior.svi`` and ``checks.diagnostics``
load ArviZ.
"""
