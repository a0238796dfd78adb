"""Plot helpers: they draw labelled axes with legends, and the reliability table matches the ECE."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from orlr_ppl import metrics  # noqa: E402
from orlr_ppl.evaluation.plots import (  # noqa: E402
    TABLE_COLUMNS,
    interval_plot,
    proba_intervals,
    rank_plots,
    reliability_diagram,
    reliability_table,
)
from orlr_ppl.inference.posterior import arviz_compat as azc  # noqa: E402

pytestmark = pytest.mark.arviz


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _random_bags(seed: int, n_bags: int = 30, n_classes: int = 4, sharpness: float = 3.0):
    """Per-bag labels and (n_b, C) softmax probabilities, partly informative about the labels."""
    rng = np.random.default_rng(seed)
    labels, proba = [], []
    for _ in range(n_bags):
        y = rng.integers(0, n_classes, size=rng.integers(1, 6))
        logits = rng.normal(size=(len(y), n_classes)) * sharpness
        logits[np.arange(len(y)), y] += rng.normal(1.0, 1.0, size=len(y))
        p = np.exp(logits - logits.max(axis=1, keepdims=True))
        labels.append(y)
        proba.append(p / p.sum(axis=1, keepdims=True))
    return labels, proba


def _labelled(ax) -> bool:
    return bool(ax.get_xlabel()) and bool(ax.get_ylabel())


@pytest.mark.parametrize("n_bins", [1, 5, 10, 15])
def test_reliability_table_counts_and_ece_match_metrics(n_bins):
    for seed in range(5):
        labels, proba = _random_bags(seed)
        table = reliability_table(labels, proba, n_bins)
        assert list(table.columns) == list(TABLE_COLUMNS) and len(table) == n_bins
        n = sum(len(y) for y in labels)
        assert table["count"].sum() == n
        filled = table[table["count"] > 0]
        assert np.all((filled["mean_confidence"] >= filled["bin_lower"]) & (filled["accuracy"] <= 1))
        ece = float((filled["count"] / n * (filled["accuracy"] - filled["mean_confidence"]).abs()).sum())
        assert ece == pytest.approx(metrics.expected_calibration_error(labels, proba, n_bins), abs=1e-12)
    with pytest.raises(ValueError, match="one \\(n_b, C\\) array per bag"):
        reliability_table(labels, proba[:-1])


def test_reliability_diagram_shows_each_model_counts_and_ece():
    labels, proba = _random_bags(0)
    flat = [p**0.3 / (p**0.3).sum(axis=1, keepdims=True) for p in proba]  # same labels, less confident
    models = {"sharp": proba, "flat": flat}
    out = reliability_diagram(labels, models, n_bins=8)
    assert out.ax.get_xlabel() == "confidence (top-class probability)" and out.ax.get_ylabel() == "accuracy"
    legend = [t.get_text() for t in out.ax.get_legend().get_texts()]
    for model in models:
        ece = metrics.expected_calibration_error(labels, models[model], 8)
        nll, brier = metrics.log_loss(labels, models[model]), metrics.brier_score(labels, models[model])
        assert out.ece[model] == ece and out.log_loss[model] == nll and out.brier[model] == brier
        assert f"{model} (NLL {nll:.3f}, Brier {brier:.3f}, ECE {ece:.3f})" in legend
        assert f"{model}: log loss {nll:.3f}, Brier {brier:.3f}, ECE {ece:.3f}" in out.caption
        n = sum(len(y) for y in labels)
        assert out.ax.get_title() == f"{n} instances, 8 confidence bins"
    # One count bar per model and bin, heights the table's counts.
    heights = [p.get_height() for p in out.count_ax.patches]
    assert len(heights) == 2 * 8
    assert heights[:8] == out.tables["sharp"]["count"].tolist()
    assert out.count_ax.get_ylabel()
    fig, ax = plt.subplots()
    assert reliability_diagram(labels, {"only": proba}, ax=ax).ax is ax
    with pytest.raises(ValueError, match="proba_by_model is empty"):
        reliability_diagram(labels, {})


def _idata(n_chains: int = 3, n_draws: int = 100):
    rng = np.random.default_rng(0)
    beta = rng.normal(size=(n_chains, n_draws, 4))
    beta[0] += 3.0  # one chain elsewhere: its ranks pile up at the top
    return azc.from_dict(
        {"posterior": {"beta": beta, "W": rng.normal(size=(n_chains, n_draws, 5, 4)), "s": beta[..., 0]}},
        dims={"beta": ["class"], "W": ["feature", "class"]},
    )


def test_rank_plots_one_panel_per_scalar_with_a_step_histogram_per_chain():
    idata = _idata()
    fig = rank_plots(idata, ["beta", "s"])
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title() for ax in panels] == ["beta[0]", "beta[1]", "beta[2]", "beta[3]", "s"]
    for ax in panels:
        assert _labelled(ax)
        assert len(ax.patches) == 3  # one step histogram per chain, never several parameters
    assert [t.get_text() for t in panels[0].get_legend().get_texts()] == [
        "chain 0",
        "chain 1",
        "chain 2",
        "uniform",
    ]
    # The shifted chain holds the top ranks of beta[0]: a full top bin, an empty bottom one.
    shifted = panels[0].patches[0].get_data()[0]
    assert shifted[0] == 0 and shifted[-1] > 30
    sub = rank_plots(idata, "W", coords={"class": [3], "feature": [0, 2]})
    assert [ax.get_title() for ax in sub.axes if ax.get_visible()] == ["W[0, 3]", "W[2, 3]"]
    capped = rank_plots(idata, "W", max_panels=6)
    assert sum(ax.get_visible() for ax in capped.axes) == 6
    assert "first 6 of 20 scalars" in capped._suptitle.get_text()
    with pytest.raises(ValueError, match="no variable 'nope'"):
        rank_plots(idata, "nope")


def test_interval_plot_draws_mean_and_interval_per_instance_and_class():
    rng = np.random.default_rng(0)
    draws = rng.dirichlet(np.ones(3), size=(200, 4))  # (S, n, C)
    pi = proba_intervals(draws, mass=0.8)
    assert pi.mean.shape == (4, 3) and pi.interval.shape == (4, 3, 2)
    assert np.all(pi.interval[..., 0] <= pi.interval[..., 1])
    ax = interval_plot(pi, class_names=["a", "b", "c"])
    assert _labelled(ax) and "80% interval" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b", "c"]
    assert len(ax.containers) == 3  # one error-bar container per class
    # Error bars span exactly the interval.
    segments = ax.containers[1].lines[2][0].get_segments()
    np.testing.assert_allclose([s[:, 1] for s in segments], pi.interval[:, 1, :])
    _, given = plt.subplots()
    assert interval_plot((pi.mean, pi.interval), ax=given) is given
    with pytest.raises(ValueError, match=r"interval \(n, C, 2\)"):
        interval_plot((pi.mean, pi.interval[..., 0]))


@pytest.mark.parametrize("n", [2, 10])
def test_interval_plot_takes_a_posterior_fits_outputs_and_saves_whole(tmp_path, n):
    """``(predict_proba(bags)[b], predict_interval(bags)[b])`` plugs in; predict_interval's list alone
    is an error that gives that recipe; the saved figure keeps its legend and labels inside it."""
    rng = np.random.default_rng(2)
    draws = rng.dirichlet(np.ones(10), size=(50, n))
    proba = [draws.mean(axis=0)]  # as predict_proba returns: B arrays (n_b, C)
    intervals = [np.quantile(draws, [0.05, 0.95], axis=0).transpose(1, 2, 0)]  # B arrays (n_b, C, 2)
    ax = interval_plot((proba[0], intervals[0]))
    for given in (intervals, intervals[0]):
        with pytest.raises(ValueError, match=r"model.predict_interval\(bags\)\[b\]"):
            interval_plot(given)
    fig = ax.figure
    fig.savefig(tmp_path / "p.png")
    renderer, frame = fig.canvas.get_renderer(), fig.bbox
    for artist in (ax.get_legend(), ax.xaxis.label, ax.yaxis.label):
        box = artist.get_window_extent(renderer)
        assert frame.x0 - 1 <= box.x0 and box.x1 <= frame.x1 + 1, artist
        assert frame.y0 - 1 <= box.y0 and box.y1 <= frame.y1 + 1, artist


def test_interval_plot_tells_24_classes_apart_and_rings_the_true_labels():
    rng = np.random.default_rng(1)
    pi = proba_intervals(rng.dirichlet(np.ones(24), size=(100, 3)))
    truth = np.array([5, -1, 23])  # the second instance's label is unknown
    ax = interval_plot(pi, ax=plt.subplots()[1], true_labels=truth)
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("_")]
    styles = {
        (
            line.get_color() if isinstance(line.get_color(), str) else tuple(line.get_color()),
            line.get_marker(),
        )
        for line in lines[:24]
    }
    assert len(styles) == 24  # no two classes look alike
    ring = lines[24]
    assert ring.get_label() == "true label" and len(ring.get_xdata()) == 2
    np.testing.assert_allclose(ring.get_ydata(), [pi.mean[0, 5], pi.mean[2, 23]])
    assert "90% interval" in ax.get_ylabel()  # the mass the bars hold, by default the package's
    with pytest.raises(ValueError, match="one label per instance"):
        interval_plot(pi, true_labels=[1, 2])


def test_reliability_table_leaves_out_unlabelled_instances_as_the_ece_does():
    rng = np.random.default_rng(3)
    proba = [rng.dirichlet(np.ones(4), size=n) for n in (5, 3, 6)]
    labels = [rng.integers(0, 4, len(p)) for p in proba]
    hidden = [np.where(rng.random(len(y)) < 0.4, -1, y) for y in labels]
    keep = [y != -1 for y in hidden]
    table = reliability_table(hidden, proba, n_bins=5)
    alone = reliability_table([y[k] for y, k in zip(labels, keep)], [p[k] for p, k in zip(proba, keep)], 5)
    assert table["count"].sum() == sum(k.sum() for k in keep) < sum(len(y) for y in labels)
    assert table.equals(alone)
    ece = metrics.expected_calibration_error(hidden, proba, n_bins=5)
    n = table["count"].sum()
    filled = table[table["count"] > 0]
    gap = (filled["count"] / n * (filled["accuracy"] - filled["mean_confidence"]).abs()).sum()
    assert gap == pytest.approx(ece)
