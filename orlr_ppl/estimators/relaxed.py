"""Predictions of an ORLR fitted with a relaxed union (issue 12): a novel class, a leak.

The plain union's transductive posteriors run the DP on logits alone
(``dp.ragged``). A novel class adds an optional slot to every bag, and a leak
adds start states, so these go through the model's own E-step instead: the
same ``BagLabelSet`` sites the fit used, at each posterior draw.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import NamedTuple

import jax
import numpy as np

from ..model.log_density import EStep, e_step, prior_scales
from ..model.numpyro_model import ModelData, make_model_data, split_model_data, sum_to_zero_basis

NOVEL_CLASS_NAME = "novel"
"""The novel class's name beside the named classes (posterior coordinates, ``predict``'s CSV)."""

_e_step = jax.jit(e_step, static_argnums=(3, 4))
"""The E-step at one draw; compiled once per shape family (the data are arguments)."""


def check_leak(leak: float | str | None) -> None:
    """ValueError unless ``leak`` is None, ``"learn"`` or a probability in (0, 1)."""
    if leak is None or (isinstance(leak, str) and leak == "learn"):
        return
    if isinstance(leak, str) or not 0.0 < float(leak) < 1.0:
        raise ValueError(f"leak={leak!r}: give None, 'learn', or a leak probability in (0, 1)")


class RelaxedDraws(NamedTuple):
    """A fitted relaxed-union model, at each of its S posterior draws (S = 1 for a point fit).

    Attributes:
        coef_draws: (S, d, C_out); intercept_draws: (S, C_out), ``C_out`` the named
            classes and, with ``novel_class``, the novel one.
        leak_draws: (S,) leak probabilities, or None (no leak).
        n_classes: named classes ``C``. novel_class: the last output is the novel class.
        max_labels: the DP's cap.
    """

    coef_draws: np.ndarray
    intercept_draws: np.ndarray
    leak_draws: np.ndarray | None
    n_classes: int
    novel_class: bool
    max_labels: int


def _e_steps(
    feats: Sequence[np.ndarray],
    sets: Sequence[np.ndarray],
    model: RelaxedDraws,
    instance_labels: Sequence[np.ndarray] | None,
) -> Iterator[tuple[ModelData, EStep]]:
    """The packed bags and, per draw, the model's E-step at that draw (see ``relaxed_draw_posteriors``)."""
    leak = None if model.leak_draws is None else "learn"  # the leak enters as a parameter, drawn or fixed
    data = make_model_data(
        feats,
        sets,
        model.n_classes,
        model.max_labels,
        canonical_shapes=True,
        novel_class=model.novel_class,
        leak=leak,
        instance_labels=instance_labels,
    )
    arrays, shape = split_model_data(data)
    arrays = jax.device_put(arrays)
    scales = prior_scales(None, None)  # the prior does not enter the E-step's posteriors
    basis = sum_to_zero_basis(data.n_outputs)
    for s in range(len(model.coef_draws)):
        params = {
            "W_raw": np.asarray(model.coef_draws[s] @ basis, np.float32),
            "beta_raw": np.asarray(model.intercept_draws[s] @ basis, np.float32),
        }
        if model.leak_draws is not None:
            eps = float(model.leak_draws[s])
            params["leak_logit"] = np.asarray(np.log(eps) - np.log1p(-eps), np.float32)
        yield data, _e_step(params, arrays, scales, shape, True)


def relaxed_draw_posteriors(
    feats: Sequence[np.ndarray],
    sets: Sequence[np.ndarray],
    model: RelaxedDraws,
    instance_labels: Sequence[np.ndarray] | None = None,
) -> Iterator[np.ndarray]:
    """Per draw, (n, C_out) ``p(y_i = c | Y_b, X_b, theta_s)`` of all bags' instances in order.

    Args:
        feats: B arrays (n_b, d), standardised as in training.
        sets: B validated label sets.
        model: the fitted model's draws.
        instance_labels: B arrays (n_b,) of labels known so far (-1 unknown), or None: the
            posteriors are then ``p(y_i = c | Y_b, y_known, X_b, theta_s)``, the model's own
            conditioning (as in a fit with instance labels); a known instance's is its label.
    """
    starts = np.concatenate([[0], np.cumsum([len(x) for x in feats])])
    for data, step in _e_steps(feats, sets, model, instance_labels):
        out = np.zeros((starts[-1], data.n_outputs))
        for bucket, post in zip(data.buckets, step.posteriors):
            ids = np.asarray(bucket.bag_ids)
            mask = np.asarray(bucket.mask)[: len(ids)]
            rows = starts[ids][:, None] + np.arange(mask.shape[1])[None, :]
            out[rows[mask]] = np.asarray(post)[: len(ids)][mask]
        yield out


def relaxed_draw_log_likelihoods(
    feats: Sequence[np.ndarray], sets: Sequence[np.ndarray], model: RelaxedDraws
) -> Iterator[np.ndarray]:
    """Per draw, (B,) ``log p(Y_b | X_b, theta_s)`` under the relaxed union, in bag order (the
    E-step's; arguments as ``relaxed_draw_posteriors``)."""
    for data, step in _e_steps(feats, sets, model, None):
        per_site = {data.site_name(k): np.asarray(ll)[None] for k, ll in enumerate(step.log_likelihoods)}
        yield data.merge_sites(per_site)[0]
