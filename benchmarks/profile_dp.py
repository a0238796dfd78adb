"""Where the time of the exact log-likelihood + gradient goes (issue 11, item 4).

Splits ``bench_dp.py``'s MIML loglik+grad on HJA- and Letter-shaped data into the jitted pieces
it is made of, each timed on its own and, interleaved with them in every repeat, the softmax
regression loglik+grad on the same instances (the reference):

  softmax       logits ``x @ w``, log-softmax and the gradient, instance labels known;
  gather        logits, log-softmax and the gather of every bucket's slot log-probabilities;
  forward       + the subset DP's forward pass (the log-likelihood alone);
  posteriors    + the backward pass and the instance posteriors (what the gradient needs);
  loglik+grad   the whole ``packed_log_likelihood`` value and gradient w.r.t. ``w``;

and, for each label-set bucket of the HJA-shaped data, the forward and posterior DP on its own
slot inputs. Each figure is the median over repeats of its time divided by the softmax time of
the same repeat (median milliseconds beside it).

    python benchmarks/profile_dp.py [--repeats 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from orlr_ppl import pack_bags, packed_log_likelihood
from orlr_ppl.dp.ragged import packed_posteriors
from orlr_ppl.dp.slots import slot_log_probs
from orlr_ppl.dp.subset_dp import BucketInputs, buckets_dp

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_dp import _time_interleaved  # noqa: E402
from shaped_data import hja_shaped, letter_shaped  # noqa: E402


def _pieces(feats, sets, labels, n_classes) -> tuple[dict, list, jax.Array]:
    """The named jitted pieces of the MIML loglik+grad, the per-bucket DPs, and the weights."""
    x = jnp.asarray(np.concatenate(feats), jnp.float32)
    y = jax.nn.one_hot(jnp.asarray(np.concatenate(labels)), n_classes)
    packed = pack_bags([len(f) for f in feats], sets)

    def inputs(w):
        log_probs = jax.nn.log_softmax(x @ w, axis=1)
        return [
            BucketInputs(slot_log_probs(log_probs, b.rows, b.labels), b.mask, b.label_mask)
            for b in packed.buckets
        ]

    pieces = {
        "softmax": jax.jit(
            lambda w: jax.value_and_grad(lambda w: jnp.sum(y * jax.nn.log_softmax(x @ w, 1)))(w)
        ),
        "gather": jax.jit(lambda w: [i.slot_log_probs for i in inputs(w)]),
        "forward": jax.jit(lambda w: sum(r.log_likelihood.sum() for r in buckets_dp(inputs(w), False))),
        "posteriors": jax.jit(lambda w: packed_posteriors(x @ w, packed)),
        "loglik+grad": jax.jit(
            lambda w: jax.value_and_grad(lambda w: packed_log_likelihood(x @ w, packed).sum())(w)
        ),
    }
    w0 = jnp.asarray(np.random.default_rng(1).normal(scale=0.1, size=(x.shape[1], n_classes)), jnp.float32)
    slot_inputs = jax.jit(inputs)(w0)
    per_bucket = []
    for b, inp in zip(packed.buckets, slot_inputs):
        label = f"K={b.labels.shape[0]} {b.mask.shape[0]}x{b.mask.shape[1]}"
        per_bucket.append((label, inp, jax.jit(lambda i: buckets_dp([i], False)[0].log_likelihood)))
        per_bucket.append((label + " +post", inp, jax.jit(lambda i: buckets_dp([i], True)[0].posteriors)))
    return pieces, per_bucket, w0


def _report(name: str, data, repeats: int, buckets: bool) -> None:
    pieces, per_bucket, w0 = _pieces(*data)
    fns = list(pieces.values())
    times = _time_interleaved(fns, w0, repeats)
    ratio = np.median(times / times[:, :1], axis=0)
    print(f"{name}:")
    for label, r, t in zip(pieces, ratio, np.median(times, axis=0)):
        print(f"  {label:<14} {1e3 * t:7.3f} ms  {r:5.2f}x softmax")
    if buckets:
        soft = pieces["softmax"]
        for label, inp, fn in per_bucket:
            t = _time_interleaved([soft, fn], [w0, inp], max(repeats // 4, 20))
            ms, ratio = 1e3 * np.median(t[:, 1]), np.median(t[:, 1] / t[:, 0])
            print(f"    bucket {label:<18} {ms:7.3f} ms  {ratio:5.2f}x softmax")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    device = jax.devices()[0].device_kind
    print(f"machine: {platform.machine()} cpus={os.cpu_count()} jax={jax.__version__} device={device}")
    rng = np.random.default_rng(0)
    _report("HJA-shaped", hja_shaped(rng), args.repeats, buckets=True)
    _report("Letter-shaped", letter_shaped(rng), args.repeats, buckets=False)


if __name__ == "__main__":
    main()
