"""Fits streamed from a bag store on disk: a stochastic MAP and exact full-data epochs
(``stochastic_map``), a mean-field SVI (``svi``), and minibatches packed once (``packed``).
"""
