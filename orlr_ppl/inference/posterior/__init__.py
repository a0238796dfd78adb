"""Posterior approximations: the Laplace approximation and its evidence (``laplace``, ``evidence``),
NUTS (``nuts`` driving NumPyro's kernel, ``chain_setup``), SVI (``svi``), and the posterior object
they build (``inference_data`` through ``arviz_compat``, the one module that knows which ArviZ is
installed). Importing ``nuts``, ``svi`` or ``inference_data`` loads ArviZ.
"""
