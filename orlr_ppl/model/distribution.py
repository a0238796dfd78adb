"""The ORed-logistic bag label set as a NumPyro distribution."""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import random
from numpyro.distributions import Distribution, constraints
from numpyro.distributions.util import validate_sample

from ..dp.bucket import PairPosteriors, bucket_log_likelihood, buckets_pair_posteriors, buckets_posteriors
from ..dp.subset_dp import DPResult
from ..dp.validation import DEFAULT_MAX_LABELS

Array = jax.Array


def _inverse_cdf_categorical(key: Array, logits: Array, shape: tuple[int, ...]) -> Array:
    """``shape`` categorical draws from ``logits`` (..., C), by one uniform per draw against the CDF.

    ``random.categorical`` (Gumbel-max) draws C uniforms per draw, and under the
    partitionable threefry that JAX uses by default its program compiles several
    times slower.
    """
    probs = jax.nn.softmax(logits, axis=-1)
    return categorical_from_uniform(random.uniform(key, shape, probs.dtype), probs)


def _refuse_too_many(too_many: np.ndarray, max_labels: int) -> None:
    """Raise a ValueError naming the batch indices whose label sets exceed ``max_labels``."""
    too_many = np.asarray(too_many)
    if np.any(too_many):
        where = [tuple(i) for i in np.argwhere(too_many).tolist()]
        raise ValueError(
            f"label set(s) at batch index {where} have more than max_labels={max_labels} labels: "
            "build the distribution with a larger max_labels"
        )


def categorical_from_uniform(u: Array, probs: Array) -> Array:
    """The class whose CDF interval holds ``u``: (...,) uniforms in [0, 1), (..., C) probabilities.

    Class ``c`` is drawn when ``cdf[c-1] <= u * cdf[-1] < cdf[c]``, an empty
    interval for a class of probability zero. When rounding puts ``u * cdf[-1]``
    at the total, the last class of positive probability is drawn.
    """
    cdf = jnp.cumsum(probs, axis=-1)
    below = jnp.sum(cdf <= u[..., None] * cdf[..., -1:], axis=-1)
    last = probs.shape[-1] - 1 - jnp.argmax(jnp.flip(probs > 0, axis=-1), axis=-1)
    return jnp.minimum(below, last).astype(jnp.int32)


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

    Three relaxations of the union (issue 12), exact in the same DP:

    - ``novel``: the last logit column is a novel (background) class that any
      bag may contain without naming it; the value has the other ``C - 1``
      columns, and the DP ends at ``Y`` and at ``Y + {novel}``.
    - ``leak``: each named class is switched on, with probability ``eps``, by
      a leak rather than an instance (noisy OR): ``log_prob`` sums the leak
      patterns on ``Y`` (the DP's start states) and adds ``log(1 - eps_c)``
      for every class ``c`` not in ``Y``. A bag may then have fewer instances
      than labels.
    - ``instance_labels``: instances whose label is known. ``log_prob`` is
      then the joint ``log p(Y, y_known | X)`` of the label set and those
      labels, so a model observing it fits bag and instance labels at once,
      and ``sample`` keeps the known labels.

    Args:
        logits: (*batch, N, C) instance class scores; bags padded to ``N``.
        instance_mask: (*batch, N) bool, real instances (default: all). Padded
            instances take no label and cost nothing.
        max_labels: the largest label set ``log_prob`` scores; the DP holds
            ``2**max_labels`` states per bag (``2**(max_labels + 1)`` with
            ``novel``). Default ``C`` when ``C`` is at most 16; set it
            explicitly above that. Values with more labels raise a ValueError
            when ``validate_args`` is on (under ``jit``, when the program runs, by
            a host check), and get a NaN log-probability when it is off.
        novel: the last class is a novel class no label set names.
        leak: () or (C_named,) leak probabilities in (0, 1), or None.
        instance_labels: (*batch, N) int known labels, -1 where unknown, or None.
        validate_args: check parameters and values (NumPyro convention; on by
            default in recent NumPyro). Checks on concrete arrays raise a
            ValueError; under ``jit`` only the label-set size is checked, at run
            time. The package's own model turns it off: its buckets' label sets are
            checked once, when the data are packed.

    Value: (*batch, C_named) int 0/1 multi-hot label set, ``C_named = C - 1``
    with ``novel`` and ``C`` without; ``event_shape == (C_named,)``.
    """

    arg_constraints = {"logits": constraints.real}
    support = constraints.independent(constraints.boolean, 1)
    pytree_data_fields = ("logits", "instance_mask", "leak", "instance_labels")
    pytree_aux_fields = ("max_labels", "novel")

    def __init__(
        self,
        logits: Array,
        instance_mask: Array | None = None,
        max_labels: int | None = None,
        *,
        novel: bool = False,
        leak: Array | float | None = None,
        instance_labels: Array | None = None,
        validate_args: bool | None = None,
    ) -> None:
        if jnp.ndim(logits) < 2:
            raise ValueError("logits must have shape (*batch, n_instances, n_classes)")
        self.novel = bool(novel)
        n_classes = jnp.shape(logits)[-1] - int(self.novel)
        if n_classes < 1:
            raise ValueError("novel=True needs at least one named class besides the novel one")
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
        self.leak = None if leak is None else jnp.broadcast_to(jnp.asarray(leak), (n_classes,))
        self.instance_labels = None if instance_labels is None else jnp.asarray(instance_labels)
        if validate_args is not False and not isinstance(logits, jax.core.Tracer):
            # Before NumPyro's own check, whose message names no bag.
            bad = ~np.all(np.isfinite(np.asarray(logits)), axis=(-1, -2))
            if np.any(bad):
                where = [tuple(i) for i in np.argwhere(bad).tolist()]
                raise ValueError(
                    f"bag(s) at batch index {where} have NaN or infinite logits: "
                    "check the features and weights"
                )
        self._check_relaxations(validate_args)
        super().__init__(
            batch_shape=jnp.shape(logits)[:-2], event_shape=(n_classes,), validate_args=validate_args
        )

    def _check_relaxations(self, validate_args: bool | None) -> None:
        """The leak in (0, 1) and instance labels of the logits' shape and classes, where concrete."""
        if self.instance_labels is not None and self.instance_labels.shape != self.instance_mask.shape:
            raise ValueError(
                f"instance_labels shape {self.instance_labels.shape} != logits shape[:-1] "
                f"{self.instance_mask.shape}"
            )
        if validate_args is False:
            return
        if self.leak is not None and not isinstance(self.leak, jax.core.Tracer):
            eps = np.asarray(self.leak)
            if not np.all((eps > 0) & (eps < 1)):
                raise ValueError(f"leak must lie in (0, 1), got {eps.tolist()}")
        if self.instance_labels is not None and not isinstance(self.instance_labels, jax.core.Tracer):
            z = np.asarray(self.instance_labels)
            bad = (z < -1) | (z >= jnp.shape(self.logits)[-1])
            if np.any(bad):
                where = [tuple(i) for i in np.argwhere(bad).tolist()]
                raise ValueError(
                    f"instance label(s) at index {where} are not -1 (unknown) or a class in "
                    f"[0, {jnp.shape(self.logits)[-1]})"
                )

    def sample(self, key: Array, sample_shape: tuple[int, ...] = ()) -> Array:
        key_y, key_leak = random.split(key)
        shape = sample_shape + jnp.shape(self.logits)[:-1]
        labels = _inverse_cdf_categorical(key_y, self.logits, shape)
        if self.instance_labels is not None:
            labels = jnp.where(self.instance_labels >= 0, self.instance_labels, labels)
        n_logits = jnp.shape(self.logits)[-1]
        hits = jax.nn.one_hot(labels, n_logits, dtype=jnp.int32) * self.instance_mask[..., None]
        union = jnp.max(hits, axis=-2)[..., : self.event_shape[0]]  # the novel class is never named
        if self.leak is not None:
            leaked = random.bernoulli(key_leak, self.leak, union.shape)
            union = jnp.maximum(
                union, (leaked & jnp.any(self.instance_mask, axis=-1)[..., None]).astype(union.dtype)
            )
        return union

    def _flat_inputs(self, value: Array) -> tuple[tuple[int, ...], tuple, Array]:
        """Batch shape, ``bucket_log_likelihood``'s arguments flattened to (M, ...), and (M,) sizes."""
        value = jnp.asarray(value)
        n_labels = jnp.sum(value != 0, axis=-1)
        if self._validate_args and self.max_labels < self.event_shape[0]:
            if isinstance(n_labels, jax.core.Tracer):
                # Under jit the sizes are known only when the program runs: a host check there, so
                # that an unscorable value raises instead of passing NaN into a sum.
                jax.debug.callback(_refuse_too_many, n_labels > self.max_labels, self.max_labels)
            else:
                _refuse_too_many(np.asarray(n_labels) > self.max_labels, self.max_labels)
        batch = jnp.broadcast_shapes(jnp.shape(value)[:-1], self.batch_shape)
        n, c = jnp.shape(self.logits)[-2:]
        named = self.event_shape[0]
        value = jnp.broadcast_to(value, batch + (named,)).reshape(-1, named)
        logits = jnp.broadcast_to(self.logits, batch + (n, c)).reshape(-1, n, c)
        mask = jnp.broadcast_to(self.instance_mask, batch + (n,)).reshape(-1, n)
        present = value != 0
        if self.novel:  # every bag may reach the novel class: an optional last slot
            present = jnp.concatenate([present, jnp.ones(present.shape[:-1] + (1,), bool)], axis=-1)
        n_slots = self.max_labels + int(self.novel)
        labels = _slot_classes(present, n_slots)
        n_labels = jnp.broadcast_to(n_labels, batch).reshape(-1)
        label_mask = jnp.arange(n_slots) < (n_labels + int(self.novel))[:, None]
        optional = (label_mask & (labels == named)) if self.novel else None
        log_leak = None
        if self.leak is not None:
            eps = jnp.concatenate([self.leak.astype(logits.dtype), jnp.zeros((c - named,), logits.dtype)])
            log_leak = jnp.where(label_mask, jnp.log(eps)[labels], -jnp.inf)
        known = None
        if self.instance_labels is not None:
            z = jnp.broadcast_to(self.instance_labels, batch + (n,)).reshape(-1, n).astype(jnp.int32)
            rank = jnp.cumsum(present, axis=-1, dtype=jnp.int32) - 1
            z_safe = jnp.clip(z, 0, c - 1)
            in_set = jnp.take_along_axis(present, z_safe, axis=-1)
            # A known label outside the set leaves its instance no slot: likelihood zero, not a guess.
            slot = jnp.where(in_set, jnp.take_along_axis(rank, z_safe, axis=-1), n_slots)
            known = jnp.where(z >= 0, slot, -1)
        return batch, (logits, mask, labels, label_mask, log_leak, optional, known), n_labels

    def _outside_leaks(self, value: Array, mask: Array, batch: tuple[int, ...]) -> Array:
        """(M,) ``sum_{c not in Y} log(1 - eps_c)``: no leak switched on a class the bag lacks.

        Zero without a leak. ``mask``: (M, N) the flattened instance mask.
        """
        if self.leak is None:
            return jnp.zeros(mask.shape[:1])
        named = self.event_shape[0]
        absent = jnp.broadcast_to(jnp.asarray(value) == 0, batch + (named,)).reshape(-1, named)
        log_off = jnp.log1p(-self.leak)
        # A padding bag (no instance) is no bag: it leaks nothing either way.
        return jnp.where(jnp.any(mask, axis=-1), jnp.sum(jnp.where(absent, log_off, 0.0), axis=-1), 0.0)

    @validate_sample
    def log_prob(self, value: Array) -> Array:
        batch, args, n_labels = self._flat_inputs(value)
        ll = bucket_log_likelihood(*args) + self._outside_leaks(value, args[1], batch)
        return jnp.where(n_labels > self.max_labels, jnp.nan, ll).reshape(batch)

    def posteriors(self, value: Array) -> DPResult:
        """The E-step: ``log_prob(value)`` and every instance's posterior given the label set.

        Args:
            value: (*batch, C) multi-hot label sets.
        Returns:
            ``DPResult`` with ``log_likelihood`` (*batch,), ``posteriors``
            (*batch, N, C), ``p(y_i = c | Y, logits)``: zero off the label set
            (and the novel class) and on padded instances; and with a leak,
            ``leak_posteriors`` (*batch, C_named), the chance that a leak
            switched each class on (zero off the set).
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
        results, resolved = buckets_posteriors([f[1] for f in flat], fallback)
        out = []
        for (batch, args, n_labels), (d, v), res in zip(flat, sites, results):
            logits, mask, labels = args[:3]
            ll = res.log_likelihood + d._outside_leaks(v, mask, batch)
            ll = jnp.where(n_labels > d.max_labels, jnp.nan, ll)
            leaked = None
            if res.leak_posteriors is not None:  # slots to classes; the novel class never leaks
                per_class = (
                    jax.nn.one_hot(labels, logits.shape[-1], dtype=ll.dtype) * res.leak_posteriors[..., None]
                )
                leaked = jnp.sum(per_class, axis=-2)[:, : d.event_shape[0]].reshape(batch + d.event_shape)
            post = res.posteriors.reshape(batch + logits.shape[1:])
            out.append(DPResult(ll.reshape(batch), post, leaked))
        return out, resolved

    def slot_classes(self, value: Array) -> tuple[Array, Array]:
        """``(classes, slot_mask)``, each (M, K) over the flattened batch: the class of each label
        slot of the DP (the novel class's index for its optional last slot) and the real slots."""
        _, args, _ = self._flat_inputs(value)
        return args[2], args[3]

    @staticmethod
    def joint_pair_posteriors(
        sites: Sequence[tuple[BagLabelSet, Array]], instance: Array, fallback: bool = True
    ) -> tuple[list[PairPosteriors], Array]:
        """Instance position ``instance``'s pairwise slot posteriors in every bag of several sites.

        Args:
            sites: (distribution, value) pairs with one batch dimension (a model's buckets).
            instance: () int, the instance position ``i``.
            fallback: as ``joint_posteriors``.
        Returns:
            Per site ``dp.bucket.PairPosteriors`` over its label slots (``slot_classes``):
            ``p(y_i = j | Y)`` and every instance's ``p(y_m = l | y_i = j, Y)``; and ()
            whether every bag was resolved in probability space.
        """
        flat = [d._flat_inputs(v) for d, v in sites]
        return buckets_pair_posteriors([f[1] for f in flat], instance, fallback)

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
