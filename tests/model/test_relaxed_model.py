"""The relaxed unions (issue 12) in the model: ``BagLabelSet`` with a novel class, a leak and known
instance labels, ``make_model_data``'s checks, and EM, MAP, NUTS and SVI on ``orlr_model``."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import DTYPES, TOL, precision
from reference import brute_force_variants
from scipy.special import softmax

from orlr_ppl.inference.point.em import fit_em
from orlr_ppl.inference.point.map import fit_map
from orlr_ppl.inference.posterior import arviz_compat as azc
from orlr_ppl.model.distribution import BagLabelSet
from orlr_ppl.model.numpyro_model import make_model_data

NAMED = 3


def _all_label_sets(n_named: int) -> np.ndarray:
    """(2**C, C) every multi-hot label set, the empty one included."""
    return np.array(list(itertools.product([0, 1], repeat=n_named)), np.int32)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("novel,leak,known", [(True, None, None), (False, 0.2, None), (True, 0.1, [2, -1])])
def test_relaxed_label_sets_are_a_distribution(dtype, novel, leak, known):
    """Summed over every label set, ``exp(log_prob)`` is one, or ``p(y_known)`` with known labels:
    the DP, the leak's factor for absent classes and the optional novel slot together normalise."""
    rng = np.random.default_rng(3)
    logits = rng.normal(size=(2, NAMED + novel)) * 2.0
    sets = _all_label_sets(NAMED)
    with precision(dtype):

        @jax.jit  # one program: eagerly, each of the DP's operations compiles on its own
        def log_prob(z, value):
            known_labels = None if known is None else jnp.asarray([known] * len(sets))
            return BagLabelSet(z, novel=novel, leak=leak, instance_labels=known_labels).log_prob(value)

        z = jnp.asarray(np.broadcast_to(logits, (len(sets),) + logits.shape), dtype)
        lp = np.asarray(log_prob(z, jnp.asarray(sets)), np.float64)
    total = np.exp(lp[np.isfinite(lp)]).sum()
    want = 1.0
    if known is not None:
        want = np.prod([softmax(logits[i])[k] for i, k in enumerate(known) if k >= 0])
    assert total == pytest.approx(want, rel=10 * TOL[dtype])
    for value, got in zip(sets, lp):  # and each one against enumeration
        label_set = np.flatnonzero(value).tolist()
        eps = None if leak is None else [leak] * len(label_set)
        ref, _ = brute_force_variants(logits, label_set, [NAMED] if novel else [], eps, known)
        if leak is not None:
            ref += (NAMED - len(label_set)) * np.log1p(-leak)
        if np.isfinite(ref):
            assert got == pytest.approx(ref, rel=TOL[dtype], abs=TOL[dtype])
        else:
            assert got == -np.inf


def test_relaxed_samples_follow_log_prob():
    """``sample`` (instance labels, their union without the novel class, then leaks) draws label
    sets as often as ``exp(log_prob)`` says."""
    logits = jnp.asarray([[1.0, -0.5, 0.2, 0.8], [0.1, 0.4, -1.0, 1.2]])
    d = BagLabelSet(logits, novel=True, leak=0.15)
    draws = np.asarray(d.sample(jax.random.PRNGKey(0), (20000,)))
    sets = _all_label_sets(NAMED)
    probs = np.exp(np.asarray(d.log_prob(jnp.asarray(sets))))
    freq = np.array([np.mean(np.all(draws == s, axis=1)) for s in sets])
    assert np.all(np.abs(freq - probs) <= 4 * np.sqrt(probs * (1 - probs) / 20000) + 1e-3), (freq, probs)


def test_leak_gradient_through_log_prob_matches_finite_differences():
    with precision("float64"):
        logits = jnp.asarray([[1.0, -0.5, 0.2, 0.8], [0.1, 0.4, -1.0, 1.2]])
        value = jnp.asarray([1, 1, 0])

        @jax.jit  # one program for the five values below, and one for the gradient: not op by op
        def f(z, eps):
            return BagLabelSet(z, novel=True, leak=eps, validate_args=False).log_prob(value)

        g_z, g_eps = jax.jit(jax.grad(f, argnums=(0, 1)))(logits, 0.2)
        h = 1e-6
        fd_eps = (f(logits, 0.2 + h) - f(logits, 0.2 - h)) / (2 * h)
        assert float(g_eps) == pytest.approx(float(fd_eps), rel=1e-6)
        bump = jnp.zeros_like(logits).at[1, 3].set(h)
        fd_z = (f(logits + bump, 0.2) - f(logits - bump, 0.2)) / (2 * h)
        assert float(g_z[1, 3]) == pytest.approx(float(fd_z), rel=1e-6)


def _simulate(n_bags=60, d=3, eps=0.1, seed=0):
    """Bags from the relaxed model: C = 3 named classes and a novel one, leaks at ``eps``."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(d, NAMED + 1)) * 2.0
    bags, sets, labels = [], [], []
    for _ in range(n_bags):
        x = rng.normal(size=(int(rng.integers(1, 6)), d))
        y = np.array([rng.choice(NAMED + 1, p=softmax(row)) for row in x @ w])
        named = set(y[y < NAMED].tolist()) | {c for c in range(NAMED) if rng.random() < eps}
        bags.append(x)
        sets.append(sorted(named))
        labels.append(y)
    return bags, sets, labels


def test_model_data_checks_the_relaxed_bags():
    bags, sets, labels = _simulate()
    short = next(b for b, (x, y) in enumerate(zip(bags, sets)) if len(y) > len(x))
    with pytest.raises(ValueError, match=f"bag {short} has .* labels but only"):
        make_model_data(bags, sets, NAMED, novel_class=True)
    empty = next(b for b, y in enumerate(sets) if not y)
    with pytest.raises(ValueError, match=f"bag {empty} has an empty label set"):
        make_model_data(bags, sets, NAMED, leak=0.1)
    make_model_data(bags, sets, NAMED, novel_class=True, leak=0.1)  # both relaxations: all possible
    known = [np.full(len(x), -1) for x in bags]
    outside = next(b for b, y in enumerate(sets) if len(y) < NAMED)
    known[outside][-1] = next(c for c in range(NAMED) if c not in sets[outside])
    with pytest.raises(ValueError, match=f"bag {outside}, instance {len(bags[outside]) - 1} has known label"):
        make_model_data(bags, sets, NAMED, novel_class=True, leak=0.1, instance_labels=known)
    known[outside][-1] = NAMED  # the novel class is allowed in any bag
    make_model_data(bags, sets, NAMED, novel_class=True, leak=0.1, instance_labels=known)


@pytest.mark.parametrize("semi", [False, True])
def test_em_and_map_reach_the_same_relaxed_optimum(semi):
    """EM's M-step (gradient steps on W, the leak in closed form) and L-BFGS on the model's joint
    find the same log posterior, with a novel class, a learnt leak and, semi-supervised, known
    labels; EM's history never falls."""
    bags, sets, labels = _simulate(seed=1)
    known = None
    if semi:  # every third instance known
        known = [np.where(np.arange(len(y)) % 3 == 0, y, -1) for y in labels]
        known = [np.where((k >= 0) & ~np.isin(k, s + [NAMED]), -1, k) for k, s in zip(known, sets)]
    data = make_model_data(
        bags, sets, NAMED, dtype=np.float64, novel_class=True, leak="learn", instance_labels=known
    )
    with precision("float64"):
        em = fit_em(data, prior_scale=1.0, intercept_scale=10.0, max_iter=400, tol=1e-12)
        mp = fit_map(data, prior_scale=1.0, intercept_scale=10.0, tol=1e-12)
    assert np.all(np.diff(em.history) >= -1e-9 * np.abs(em.history[1:]))
    assert em.log_posterior == pytest.approx(mp.log_posterior, abs=1e-4)
    assert em.leak == pytest.approx(mp.leak, abs=1e-3)
    assert em.W.shape == (3, NAMED + 1)


@pytest.mark.arviz
def test_nuts_samples_the_leak_and_the_novel_class():
    """NUTS runs the same relaxed model: the posterior holds ``leak`` in (0, 1) beside ``W`` with a
    novel column, near the MAP, with the usual ArviZ groups (SVI: the next test)."""
    from orlr_ppl import NUTS
    from orlr_ppl.inference.posterior.nuts import fit_nuts

    bags, sets, _ = _simulate(n_bags=40, seed=2)
    data = make_model_data(bags, sets, NAMED, novel_class=True, leak="learn")
    mp = fit_map(data)
    settings = NUTS(num_warmup=100, num_samples=100, num_chains=1, max_num_samples=0, init="zeros")
    idata = fit_nuts(data, settings, seed=0)
    leak = idata.posterior["leak"].values
    assert leak.shape == (1, 100) and np.all((leak > 0) & (leak < 1))
    assert idata.posterior["W"].shape[-1] == NAMED + 1
    assert {"posterior", "log_likelihood", "sample_stats", "observed_data"} <= set(azc.groups(idata))
    assert abs(float(np.median(leak)) - mp.leak) < 3 * float(np.std(leak)) + 0.02


@pytest.mark.arviz
def test_posterior_of_a_named_novel_class_model_names_its_extra_class():
    """SVI on the relaxed model, from a ``MIMLData`` with class names: ``leak`` in (0, 1) beside a
    novel column, whose ``class`` coordinate is the names and "novel" for ``W``/``beta``, and the
    names alone for the label sets (observed, predictive)."""
    from orlr_ppl import ORLR, SVI, MIMLData

    bags, sets, _ = _simulate(n_bags=60, seed=6)
    one = [b for b, s in enumerate(sets) if len(s) == 1][:20]  # one label-set bucket: SVI's eager
    names = ["owl", "jay", "wren"]  # init compiles each bucket's operations, op by op
    data = MIMLData([bags[b] for b in one], [sets[b] for b in one], class_names=names, n_classes=NAMED)
    model = ORLR(inference=SVI(num_steps=50), novel_class=True, leak="learn", random_state=0).fit(data)
    idata = model.posterior_
    leak = idata.posterior["leak"].values
    assert np.all((leak > 0) & (leak < 1)) and idata.posterior["W"].shape[-1] == NAMED + 1
    assert list(idata.posterior["W"].coords["class"].values) == [*names, "novel"]
    assert list(idata.posterior["beta"].coords["class"].values) == [*names, "novel"]
    assert list(idata.observed_data["Y"].coords["class"].values) == names
    assert list(idata.posterior_predictive["Y"].coords["class"].values) == names


@pytest.mark.arviz
def test_orlr_estimator_with_novel_class_leak_and_known_labels(tmp_path):
    """``ORLR(novel_class=True, leak="learn")``: C + 1 probability columns, bags the plain union
    rejects, a semi-supervised fit, transductive posteriors equal to the model's own E-step
    (zero off ``Y_b + {novel}``), bag scores over the named classes with the leak, and a
    save/load round trip with identical predictions."""
    from orlr_ppl import ORLR

    bags, sets, labels = _simulate(n_bags=80, seed=4)
    with pytest.raises(ValueError, match="labels but only"):
        ORLR(novel_class=True).fit(bags, sets)
    with pytest.raises(ValueError, match="leak="):
        ORLR(leak=1.5).fit(bags, sets)
    first = [(np.arange(len(y)) == 0) & np.isin(y, s + [NAMED]) for y, s in zip(labels, sets)]
    known = [np.where(f, y, -1) for f, y in zip(first, labels)]
    model = ORLR(novel_class=True, leak="learn", n_classes=NAMED).fit(bags, sets, instance_labels=known)
    assert model.coef_.shape == (3, NAMED + 1) and 0.0 < model.leak_ < 1.0
    proba = model.predict_proba(bags)
    assert proba[0].shape == (len(bags[0]), NAMED + 1)
    trans = model.predict_proba(bags, sets)
    for p, s in zip(trans, sets):
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-5)
        off = [c for c in range(NAMED) if c not in s]
        assert np.all(p[:, off] == 0.0)
    # The transductive posterior is the DP's with the fitted leak, checked on one bag by enumeration.
    b = next(i for i, (x, s) in enumerate(zip(bags, sets)) if 2 <= len(x) <= 4 and s)
    logits = model._logits(model._check_bags([bags[b]]))[0]
    _, want = brute_force_variants(logits, sets[b], [NAMED], [model.leak_] * len(sets[b]))
    np.testing.assert_allclose(trans[b], want, atol=1e-4)
    scores = model.bag_scores(bags, rule="model")
    assert scores.shape == (len(bags), NAMED) and np.all(scores >= model.leak_ - 1e-6)
    assert model.predict_bags(bags).shape == (len(bags), NAMED)
    model.save(tmp_path / "m")
    again = ORLR.load(tmp_path / "m")
    assert again.leak_ == pytest.approx(model.leak_)
    np.testing.assert_allclose(np.concatenate(again.predict_proba(bags, sets)), np.concatenate(trans))


def test_known_labels_raise_naming_bag_and_instance_through_the_estimator():
    from orlr_ppl import ORLR

    bags, sets, labels = _simulate(n_bags=30, seed=5)
    known = [np.full(len(x), -1) for x in bags]
    b = next(i for i, s in enumerate(sets) if len(s) < NAMED)
    known[b][0] = next(c for c in range(NAMED) if c not in sets[b])
    with pytest.raises(ValueError, match=f"bag {b}, instance 0 has known label"):
        ORLR(novel_class=True, leak=0.1, n_classes=NAMED).fit(bags, sets, instance_labels=known)
