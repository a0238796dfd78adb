"""Cost of the exact MIML likelihood against plain softmax regression.

Times log-likelihood + gradient w.r.t. W, jitted, for

  (a) the exact ORed-logistic bag likelihood (subset DP) on ragged logits laid end to end
      (``packed_log_likelihood``, the public ragged API),
  (a') the same likelihood as the fits evaluate it: ``orlr_model``'s potential and its gradient
      (``model.log_density.potential_and_grad``, flat prior, features packed per bucket), and
  (b) softmax regression with the instance labels known,

on the same instances, for (i) HJA-shaped synthetic data (548 bags, mean 9.1
instances and 2.1 labels a bag, 13 classes, 38 features + bias) and (ii)
Letter-shaped data (144 bags shaped like the words of Frost's "The Road Not
Taken": one instance per letter, label set = distinct letters, 26 classes,
16 features + bias); and the MIML time for one bag of 1k, 2k, 4k instances
with |Y| = 5, which must grow linearly.

The functions compared are timed in turn within every repeat of one run, and
each ratio is the median of the per-repeat ratios, so machine noise hits both
sides alike.

    python -m benchmarks.bench_dp [--repeats 200] [--x64] [--relaxed]

``--relaxed`` adds, per data set, the model path with each relaxation of the union (a
novel class, a fixed and a learnt leak, every third instance's label known, all together),
timed interleaved with softmax, as ratios to it.

The last line printed is ``hja_ratio=<x> letter_ratio=<y> doubling=<z>``.
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.harness import bags_from_shapes, hja_shaped, letter_shaped, machine, time_interleaved
from orlr_ppl import pack_bags, packed_log_likelihood
from orlr_ppl.model.log_density import potential_and_grad, prior_scales
from orlr_ppl.model.numpyro_model import make_model_data, split_model_data, sum_to_zero_basis


def _objectives(feats, sets, labels, n_classes):
    x = jnp.asarray(np.concatenate(feats), jnp.float32)
    y = jax.nn.one_hot(jnp.asarray(np.concatenate(labels)), n_classes)
    packed = pack_bags([len(f) for f in feats], sets)

    @jax.jit
    def miml(w):
        return jax.value_and_grad(lambda w: packed_log_likelihood(x @ w, packed).sum())(w)

    @jax.jit
    def softmax(w):
        return jax.value_and_grad(lambda w: jnp.sum(y * jax.nn.log_softmax(x @ w, axis=1)))(w)

    w0 = jnp.asarray(np.random.default_rng(1).normal(scale=0.1, size=(x.shape[1], n_classes)), jnp.float32)
    return miml, softmax, w0, packed


def _model_objective(feats, sets, n_classes, **relaxation):
    """(a'): the model's potential and gradient at weights ``w`` (d, C_out), as raw weights ``w @ basis``.

    ``relaxation``: ``make_model_data``'s ``novel_class``, ``leak`` or ``instance_labels``;
    a learnt leak is held at 0.05.
    """
    data = make_model_data(feats, sets, n_classes, **relaxation)
    arrays, shape = split_model_data(data)
    scales = prior_scales(None, None)
    basis = jnp.asarray(sum_to_zero_basis(data.n_outputs), jnp.float32)
    extra = {"leak_logit": jnp.asarray(np.log(0.05 / 0.95), jnp.float32)} if data.leak == "learn" else {}

    def model(w):
        return potential_and_grad({"W_raw": w @ basis, **extra}, arrays, scales, shape, False)

    return model


def _relaxed_rows(feats, sets, labels, n_classes, softmax, w0, repeats: int) -> dict[str, float]:
    """Model path with each relaxation of the union, as ratios to softmax, timed interleaved."""
    known = [np.where(np.arange(len(y)) % 3 == 0, y, -1) for y in labels]  # every third instance known
    variants = {
        "plain": ({}, w0),
        "novel": ({"novel_class": True}, jnp.concatenate([w0, jnp.zeros_like(w0[:, :1])], axis=1)),
        "leak_fixed": ({"leak": 0.05}, w0),
        "leak_learn": ({"leak": "learn"}, w0),
        "known_third": ({"instance_labels": known}, w0),
        "novel_leak_known": (
            {"novel_class": True, "leak": "learn", "instance_labels": known},
            jnp.concatenate([w0, jnp.zeros_like(w0[:, :1])], axis=1),
        ),
    }
    fns = [softmax] + [_model_objective(feats, sets, n_classes, **kw) for kw, _ in variants.values()]
    times = time_interleaved(fns, [w0] + [w for _, w in variants.values()], repeats)
    return {name: float(np.median(times[:, j + 1] / times[:, 0])) for j, name in enumerate(variants)}


def _shape_summary(packed) -> str:
    parts = [f"K={b.labels.shape[0]}:{b.mask.shape[0]}x{b.mask.shape[1]}" for b in packed.buckets]
    return " ".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--x64", action="store_true", help="float64 (jax_enable_x64)")
    parser.add_argument("--relaxed", action="store_true", help="also time the relaxed unions' model path")
    args = parser.parse_args()
    if args.x64:
        jax.config.update("jax_enable_x64", True)
    rng = np.random.default_rng(0)
    print(f"{machine()}; dtype={'float64' if args.x64 else 'float32'}")

    ratios, model_ratios = {}, {}
    for name, make in [("hja", hja_shaped), ("letter", letter_shaped)]:
        feats, sets, labels, n_classes = make(rng)
        miml, softmax, w0, packed = _objectives(feats, sets, labels, n_classes)
        model = _model_objective(feats, sets, n_classes)
        times = time_interleaved([miml, softmax, model], w0, args.repeats)
        t_miml, t_soft, t_model = np.median(times, axis=0)
        ratio = float(np.median(times[:, 0] / times[:, 1]))
        model_ratios[name] = float(np.median(times[:, 2] / times[:, 1]))
        n_inst = sum(len(f) for f in feats)
        mean_k = np.mean([len(s) for s in sets])
        print(
            f"{name}: {len(feats)} bags, {n_inst} instances, mean |Y| {mean_k:.2f}, max |Y| "
            f"{max(len(s) for s in sets)}, buckets [N x B] {_shape_summary(packed)}"
        )
        print(
            f"  MIML {t_miml * 1e3:.3f} ms, softmax {t_soft * 1e3:.3f} ms, "
            f"ratio {ratio:.2f} (median of pairs); model path {t_model * 1e3:.3f} ms, "
            f"ratio {model_ratios[name]:.2f}"
        )
        ratios[name] = ratio
        if args.relaxed:
            rows = _relaxed_rows(feats, sets, labels, n_classes, softmax, w0, args.repeats)
            line = " ".join(f"{k}={v:.2f}" for k, v in rows.items())
            print(f"  model path / softmax, relaxed unions: {line}")

    sizes = (1000, 2000, 4000)
    fns, ws = [], []
    for n in sizes:
        feats, sets, labels = bags_from_shapes([n], [np.arange(5)], 8, 16, rng)
        miml, _, w0, _ = _objectives(feats, sets, labels, 8)
        fns.append(miml)
        ws.append(w0)
    times = time_interleaved(fns, ws, max(args.repeats // 2, 20))
    for n, t in zip(sizes, np.median(times, axis=0)):
        print(f"one bag, n={n}, |Y|=5: MIML {t * 1e3:.3f} ms")
    doublings = [float(np.median(times[:, i + 1] / times[:, i])) for i in range(2)]
    print(f"  time ratio per doubling (median of repeats): {doublings[0]:.2f}, {doublings[1]:.2f}")
    print(
        f"hja_ratio={ratios['hja']:.2f} letter_ratio={ratios['letter']:.2f} doubling={max(doublings):.2f} "
        f"hja_model_ratio={model_ratios['hja']:.2f} letter_model_ratio={model_ratios['letter']:.2f}"
    )


if __name__ == "__main__":
    main()
