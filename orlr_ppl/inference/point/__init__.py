"""Point estimates of the model: the posterior mode by L-BFGS (``map``, FISTA in ``prox`` under
the l2,1 prior) or by the paper's EM (``em`` over the generic ``em_driver``; ``stochastic_em``,
``leak_step``), their first-order test (``optimality``), and the MIMM baseline's EM (``mimm_em``,
``mimm_steps``).
"""
