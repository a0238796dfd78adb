"""The ORed-logistic bag label set as a NumPyro distribution."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.util import validate_sample

from ..dp.bucket import bucket_log_likelihood, buckets_posteriors
from ..dp.subset_dp import DPResult
from ..dp.validation import DEFAULT_MAX_LABELS

Array = jax.Array


def _slot_classes(present: Array, n_slots: int) -> Array:
    """(B, C) bool label sets -> (B, n_slots) int32 their classes in increasing order, 0 past the end.

    Slot ``j`` holds the class whose running count of set members is ``j + 1``.
    A comparison and a sum rather than an argsort: with the data passed to a
    compiled program as arguments, a sort would run at every gradient (XLA
    folds it only when the data are constants), and CPU sorts are slow.
    """
    rank = jnp.cumsum(present, axis=-1, dtype=jnp.int32) - 1
    hit = present[:, None, :] & (rank[:, None, :] == jnp.arange(n_slots, dtype=jnp.int32)[:, None])
    classes = jnp.arange(present.shape[-1], dtype=jnp.int32)
    return jnp.sum(jnp.where(hit, classes, 0), axis=-1, dtype=jnp.int32)


class BagLabelSet(Distribution):
    """Label set of a bag: the union of its instances' independent labels.

    Instance ``i`` of a bag has ``y_i ~ Categorical(logits=logits[..., i, :])``
    and the bag's value is the multi-hot vector of ``{y_i}``. ``log_prob`` is
    exact (the subset DP); ``sample`` draws instance labels and returns their
    union, so ``numpyro.infer.Predictive`` simulates label sets.

    Args:
        logits: (*batch, N, C) instance class scores; bags padded to ``N``.
        instance_mask: (*batch, N) bool, real instances (default: all). Padded
            instances take no label and cost nothing.
        max_labels: the largest label set ``log_prob`` scores; the DP holds
            ``2**max_labels`` states per bag. Default ``C`` when ``C`` is at
            most 16; set it explicitly above that. Values with more labels
            get a NaN log-probability (a ValueError when the value is concrete
            and ``validate_args`` is on).
        validate_args: check parameters and values (NumPyro convention; on by
            default in recent NumPyro). Checks on concrete arrays raise a
            ValueError; under ``jit`` they are skipped and an unscorable value
            gets NaN.

    Value: (*batch, C) int 0/1 multi-hot label set; ``event_shape == (C,)``.
    """

    arg_constraints = {"logits": constraints.real}
    support = constraints.independent(constraints.boolean, 1)
    pytree_data_fields = ("logits", "instance_mask")
    pytree_aux_fields = ("max_labels",)

    def __init__(
        self,
        logits: Array,
        instance_mask: Array | None = None,
        max_labels: int | None = None,
        *,
        validate_args: bool | None = None,
    ) -> None:
        if jnp.ndim(logits) < 2:
            raise ValueError("logits must have shape (*batch, n_instances, n_classes)")
        n_classes = jnp.shape(logits)[-1]
        if max_labels is None:
            if n_classes > DEFAULT_MAX_LABELS:
                raise ValueError(
                    f"{n_classes} classes: set max_labels to the largest label set to score "
                    f"(the DP holds 2**max_labels states per bag)"
                )
            max_labels = n_classes
        self.logits = logits
        self.instance_mask = (
            jnp.ones(jnp.shape(logits)[:-1], bool)
            if instance_mask is None
            else jnp.asarray(instance_mask, bool)
        )
        if self.instance_mask.shape != jnp.shape(logits)[:-1]:
            raise ValueError(
                f"instance_mask shape {self.instance_mask.shape} != logits shape[:-1] "
                f"{jnp.shape(logits)[:-1]}"
            )
        self.max_labels = int(min(max_labels, n_classes))
        if validate_args is not False and not isinstance(logits, jax.core.Tracer):
            # Before NumPyro's own check, whose message names no bag.
            bad = ~np.all(np.isfinite(np.asarray(logits)), axis=(-1, -2))
            if np.any(bad):
                where = [tuple(i) for i in np.argwhere(bad).tolist()]
                raise ValueError(
                    f"bag(s) at batch index {where} have NaN or infinite logits: "
                    "check the features and weights"
                )
        super().__init__(
            batch_shape=jnp.shape(logits)[:-2], event_shape=(n_classes,), validate_args=validate_args
        )

    def sample(self, key: Array, sample_shape: tuple[int, ...] = ()) -> Array:
        shape = sample_shape + jnp.shape(self.logits)[:-1]
        labels = random.categorical(key, self.logits, shape=shape)
        hits = jax.nn.one_hot(labels, self.event_shape[0], dtype=jnp.int32) * self.instance_mask[..., None]
        return jnp.max(hits, axis=-2)

    def _flat_inputs(self, value: Array) -> tuple[tuple[int, ...], Array, Array, Array, Array, Array]:
        """Batch shape, and (M, N, C) logits, (M, N) mask, (M, K) slots, (M, K) slot mask, (M,) sizes."""
        value = jnp.asarray(value)
        n_labels = jnp.sum(value != 0, axis=-1)
        if self._validate_args and not isinstance(value, jax.core.Tracer):
            too_many = np.asarray(n_labels) > self.max_labels
            if np.any(too_many):
                where = [tuple(i) for i in np.argwhere(too_many).tolist()]
                raise ValueError(
                    f"label set(s) at batch index {where} have more than max_labels="
                    f"{self.max_labels} labels: build the distribution with a larger max_labels"
                )
        batch = jnp.broadcast_shapes(jnp.shape(value)[:-1], self.batch_shape)
        n, c = jnp.shape(self.logits)[-2:]
        value = jnp.broadcast_to(value, batch + (c,)).reshape(-1, c)
        logits = jnp.broadcast_to(self.logits, batch + (n, c)).reshape(-1, n, c)
        mask = jnp.broadcast_to(self.instance_mask, batch + (n,)).reshape(-1, n)
        labels = _slot_classes(value != 0, self.max_labels)
        n_labels = jnp.broadcast_to(n_labels, batch).reshape(-1)
        label_mask = jnp.arange(self.max_labels) < n_labels[:, None]
        return batch, logits, mask, labels, label_mask, n_labels

    @validate_sample
    def log_prob(self, value: Array) -> Array:
        batch, logits, mask, labels, label_mask, n_labels = self._flat_inputs(value)
        ll = bucket_log_likelihood(logits, mask, labels, label_mask)
        return jnp.where(n_labels > self.max_labels, jnp.nan, ll).reshape(batch)

    def posteriors(self, value: Array) -> DPResult:
        """The E-step: ``log_prob(value)`` and every instance's posterior given the label set.

        Args:
            value: (*batch, C) multi-hot label sets.
        Returns:
            ``DPResult`` with ``log_likelihood`` (*batch,) and ``posteriors``
            (*batch, N, C), ``p(y_i = c | Y, logits)``: zero off the label set
            and on padded instances.
        """
        return BagLabelSet.joint_posteriors([(self, value)])[0][0]

    @staticmethod
    def joint_posteriors(
        sites: Sequence[tuple[BagLabelSet, Array]], fallback: bool = True
    ) -> tuple[list[DPResult], Array]:
        """``posteriors`` of several (distribution, value) pairs, e.g. a model's per-bucket sites.

        One DP call for all of them: their scans and underflow fallback are
        shared, so a compiled E-step is several times smaller than with one
        call per site. Returns the results and () whether every bag was
        resolved in probability space; with ``fallback=False`` the log-space
        rerun is left out of the program, and results are exact only where
        that flag is True (``dp.bucket.buckets_posteriors``).
        """
        flat = [d._flat_inputs(v) for d, v in sites]
        results, resolved = buckets_posteriors([f[1:5] for f in flat], fallback)
        out = []
        for (batch, logits, *_, n_labels), (d, _), res in zip(flat, sites, results):
            ll = jnp.where(n_labels > d.max_labels, jnp.nan, res.log_likelihood)
            out.append(DPResult(ll.reshape(batch), res.posteriors.reshape(batch + logits.shape[1:])))
        return out, resolved

    def expected_complete_log_prob(self, responsibilities: Array) -> Array:
        """The M-step's objective: ``sum_i sum_c r_ic log p(y_i = c | logits_i)``, (*batch,).

        The expected log-probability of the instance labels under
        ``responsibilities`` (*batch, N, C), e.g. ``posteriors(value)``. The
        label set is a function of the instance labels, so when ``r`` puts no
        mass off the set this is the expected complete-data log-likelihood
        whose rise (EM's inequality) never lowers ``log_prob``.
        """
        log_p = jax.nn.log_softmax(self.logits, axis=-1)
        terms = jnp.where(self.instance_mask[..., None], responsibilities * log_p, 0.0)
        return jnp.sum(terms, axis=(-1, -2))
