"""``MIMLData``: bags of instances with bag-level label sets, as users bring them.

One object carries everything a MIML experiment needs: the ragged bags, the
label sets (absent for bags only to be predicted), the (optional,
evaluation-only) instance labels, class and feature names and the bags'
original ids. Splits are made at bag level and are seeded (estimators fit
their feature maps on the training bags only, so nothing of the test bags
leaks into training). Bags that break the union assumption (``union``)
are reported by ``validate``; those the model cannot fit at all (likelihood
zero) stop fitting and are removed only on request by ``drop_impossible``,
which says which it removed. An instance label -1 marks an unlabelled
instance (the HJA birdsong data leave half their segments unlabelled): kept,
never checked against its bag, skipped by the metrics. Grouping instances
into bags and reading labels: ``_labels``; the constructor's checks:
``_checks``; counts and distributions for a report: ``summary``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ._checks import check_features, check_label_ranges, instance_arrays, top_label
from ._labels import (
    UNLABELLED,
    BagLabels,
    encode,
    group_by_bag,
    label_list,
    labels_in_order,
    plain,
    warn_unnamed_classes,
)
from .collinearity import LinearDependencies, linear_dependencies
from .summary import DataSummary, Spread
from .union import BagProblem, union_problems

__all__ = ["BagProblem", "DataSummary", "MIMLData"]  # all but MIMLData: re-exported

if TYPE_CHECKING:  # pandas is imported lazily: only the DataFrame constructor needs it
    import pandas as pd


@dataclass(frozen=True, eq=False)
class MIMLData:
    """Bags, their label sets and optional instance labels.

    Attributes:
        bags: B arrays (n_b, d) of instance features (float64).
        label_sets: B sorted lists of class indices in ``[0, n_classes)``, or
            None for bags without labels (to predict, not to fit).
        instance_labels: B int arrays (n_b,) (used only to evaluate), or None;
            -1 marks an unlabelled instance.
        class_names: C names (default "0".."C-1").
        feature_names: d names (default "x0".."x{d-1}").
        n_classes: C (default: largest label + 1, at least 2; without label
            sets, the largest instance label + 1).
        bag_ids: B original bag ids (default 0..B-1), used in messages.
        class_ids: C ids the classes have in the source files, in class order
            (``read_bag_csv``: the HJA's species 1..13 are classes 0..12);
            default 0..C-1.

    Construction checks shapes, finiteness and label ranges, naming the bag;
    it does not reject bags that break the union assumption (see
    ``validate``): those are the user's to inspect, never dropped silently.
    """

    bags: list[np.ndarray]
    label_sets: list[list[int]] | None
    instance_labels: list[np.ndarray] | None = None
    class_names: list[str] | None = None
    feature_names: list[str] | None = None
    n_classes: int | None = None
    bag_ids: list[Hashable] | None = field(default=None)
    class_ids: list[Hashable] | None = None

    def __post_init__(self) -> None:
        bags = [np.asarray(x, dtype=np.float64) for x in self.bags]
        if len(bags) == 0:
            raise ValueError("MIMLData needs at least one bag")
        if self.label_sets is not None and len(self.label_sets) != len(bags):
            raise ValueError(f"got {len(bags)} bags but {len(self.label_sets)} label sets: give one per bag")
        ids = list(range(len(bags))) if self.bag_ids is None else list(self.bag_ids)
        if len(ids) != len(bags):
            raise ValueError(f"got {len(bags)} bags but {len(ids)} bag ids")
        d = check_features(bags, ids)
        sets = (
            None
            if self.label_sets is None
            else [label_list(s, b, ids) for b, s in enumerate(self.label_sets)]
        )
        inst = None if self.instance_labels is None else instance_arrays(self.instance_labels, bags, ids)
        n_classes = self.n_classes
        if n_classes is None:
            n_classes = max(top_label(sets, inst) + 1, 2, len(self.class_names or ()))
            if sets is not None and self.class_names is None:
                warn_unnamed_classes(sets, n_classes, "MIMLData")
        check_label_ranges(sets, inst, n_classes, ids)
        classes = [str(c) for c in range(n_classes)] if self.class_names is None else list(self.class_names)
        if len(classes) != n_classes:
            raise ValueError(f"got {len(classes)} class names for {n_classes} classes")
        class_ids = list(range(n_classes)) if self.class_ids is None else [plain(c) for c in self.class_ids]
        if len(class_ids) != n_classes or len(set(class_ids)) != n_classes:
            raise ValueError(f"class_ids {class_ids[:20]}: need {n_classes} distinct ids, one per class")
        feats = [f"x{j}" for j in range(d)] if self.feature_names is None else list(self.feature_names)
        if len(feats) != d:
            raise ValueError(f"got {len(feats)} feature names for {d} features")
        for name, value in (
            ("bags", bags),
            ("label_sets", sets),
            ("instance_labels", inst),
            ("class_names", classes),
            ("feature_names", feats),
            ("n_classes", int(n_classes)),
            ("bag_ids", ids),
            ("class_ids", class_ids),
        ):
            object.__setattr__(self, name, value)

    # -- constructors --------------------------------------------------------

    @classmethod
    def from_arrays(
        cls,
        features: np.ndarray,
        bag_labels: BagLabels | None,
        bag_ids: Sequence[Hashable] | np.ndarray | None = None,
        *,
        bag_id_column: int | None = None,
        instance_labels: Sequence[Any] | np.ndarray | None = None,
        class_names: Sequence[str] | None = None,
        feature_names: Sequence[str] | None = None,
        n_classes: int | None = None,
        class_ids: Sequence[Hashable] | None = None,
    ) -> MIMLData:
        """From a flat (n, d) instance array and a bag id per instance.

        Args:
            features: (n, d) instance features; with ``bag_id_column`` one of
                its columns holds the bag ids (and is removed).
            bag_labels: each bag's labels: a mapping bag id -> labels, a
                sequence of label lists in order of the bags' first
                appearance, or a (B, C) 0/1 array in that order; or None for
                bags without labels. Labels are class indices, or class names
                when ``class_names`` is given.
            bag_ids: (n,) the bag of each instance (or use ``bag_id_column``).
                Instances of a bag need not be contiguous; bags are numbered
                in order of first appearance.
            instance_labels: (n,) hidden instance labels, for evaluation
                (indices, or names with ``class_names``; -1: unlabelled).
            class_names, feature_names, n_classes, class_ids: see the class docstring.

        Raises:
            ValueError: also for labels that are names (strings) without
                ``class_names``, or names missing from ``class_names``.
        """
        x = np.asarray(features)
        if x.ndim != 2:
            raise ValueError(f"features must be a flat (n_instances, n_features) array, got shape {x.shape}")
        if (bag_ids is None) == (bag_id_column is None):
            raise ValueError("give the bag of each instance: either bag_ids or bag_id_column")
        if bag_id_column is not None:
            ids = x[:, bag_id_column]
            x = np.delete(x, bag_id_column, axis=1)
            if feature_names is not None and len(feature_names) == x.shape[1] + 1:
                feature_names = [
                    f for j, f in enumerate(feature_names) if j != bag_id_column % (x.shape[1] + 1)
                ]
        else:
            ids = np.asarray(bag_ids)
        if ids.shape != (len(x),):
            raise ValueError(
                f"need one bag id per instance: {len(x)} instances, bag ids of shape {ids.shape}"
            )
        order, members = group_by_bag(ids)
        labels = None if bag_labels is None else labels_in_order(bag_labels, order, class_names)
        inst = None
        if instance_labels is not None:
            lab = np.asarray(instance_labels)
            if lab.shape != (len(x),):
                raise ValueError(f"need one instance label per instance: {len(x)} instances, got {lab.shape}")
            codes = encode(lab, class_names, "instance labels", unlabelled=True)
            inst = [codes[m] for m in members]
        return cls(
            bags=[x[m].astype(np.float64) for m in members],
            label_sets=labels,
            instance_labels=inst,
            class_names=None if class_names is None else list(class_names),
            feature_names=None if feature_names is None else list(feature_names),
            n_classes=n_classes,
            bag_ids=order,
            class_ids=None if class_ids is None else list(class_ids),
        )

    @classmethod
    def from_dataframe(
        cls,
        df: pd.DataFrame,
        bag_column: str,
        bag_labels: Mapping[Hashable, Iterable[Any]] | pd.Series | str,
        *,
        feature_columns: Sequence[str] | None = None,
        instance_label_column: str | None = None,
        class_names: Sequence[str] | None = None,
        n_classes: int | None = None,
    ) -> MIMLData:
        """From a DataFrame with one row per instance and a bag-id column.

        Args:
            df: one row per instance.
            bag_column: the column holding each instance's bag id.
            bag_labels: a mapping (or Series indexed by bag id) bag id ->
                labels, or the name of a column of ``df`` holding each row's
                bag label list (all rows of a bag must agree).
            feature_columns: default: every column except the bag, label and
                instance-label columns (all must be numeric; bool and text
                columns, object or string dtype, are not).
            instance_label_column: column of hidden instance labels.
            class_names, n_classes: see the class docstring.
        """
        for col in (bag_column, instance_label_column, bag_labels if isinstance(bag_labels, str) else None):
            if col is not None and col not in df.columns:
                raise ValueError(f"DataFrame has no column {col!r} (columns: {list(df.columns)})")
        skip = {bag_column, instance_label_column, bag_labels if isinstance(bag_labels, str) else None}
        cols = [c for c in df.columns if c not in skip] if feature_columns is None else list(feature_columns)
        missing = [c for c in cols if c not in df.columns]
        if missing:
            raise ValueError(f"DataFrame has no feature column(s) {missing}")
        from pandas.api.types import is_bool_dtype, is_numeric_dtype

        # pandas' own dtype test: np.issubdtype raises on extension dtypes (pandas 3's default "str")
        non_numeric = [c for c in cols if not is_numeric_dtype(df[c].dtype) or is_bool_dtype(df[c].dtype)]
        if non_numeric:
            raise ValueError(
                f"feature column(s) {non_numeric} are not numeric: encode them or pass feature_columns"
            )
        ids = df[bag_column].to_numpy()
        if isinstance(bag_labels, str):
            per_row = df[bag_labels].tolist()
            mapping: dict[Hashable, list[Any]] = {}
            for row, (bag, labs) in enumerate(zip(ids, per_row)):
                bag, labs = plain(bag), sorted(labs) if not isinstance(labs, str) else [labs]
                if mapping.setdefault(bag, labs) != labs:
                    raise ValueError(
                        f"row {row}: bag {bag!r} has labels {labs} here but {mapping[bag]} on an earlier "
                        f"row; column {bag_labels!r} must be the same on every row of a bag"
                    )
            bag_labels = mapping
        elif hasattr(bag_labels, "to_dict"):
            bag_labels = bag_labels.to_dict()
        return cls.from_arrays(
            df[cols].to_numpy(dtype=np.float64, na_value=np.nan),  # a missing value: the NaN error
            bag_labels,
            bag_ids=ids,
            instance_labels=None if instance_label_column is None else df[instance_label_column].to_numpy(),
            class_names=class_names,
            feature_names=[str(c) for c in cols],
            n_classes=n_classes,
        )

    # -- views ---------------------------------------------------------------

    @property
    def n_bags(self) -> int:
        return len(self.bags)

    @property
    def n_instances(self) -> int:
        return int(sum(len(x) for x in self.bags))

    @property
    def n_features(self) -> int:
        return int(self.bags[0].shape[1])

    def __len__(self) -> int:
        return len(self.bags)

    def __repr__(self) -> str:
        inst = "with" if self.instance_labels is not None else "without"
        sets = "" if self.label_sets is not None else ", without bag label sets"
        return (
            f"MIMLData({self.n_bags} bags, {self.n_instances} instances, {self.n_features} features, "
            f"{self.n_classes} classes, {inst} instance labels{sets})"
        )

    def summary(self) -> DataSummary:
        """Counts and distributions of these bags; ``str()`` of it is a readable report (``summary``).

        Runs ``validate()`` once, for the bags the union cannot explain.
        """
        sizes = np.array([len(x) for x in self.bags])
        sets = self.label_sets
        problems = self.validate() if sets is not None else None
        by_kind: dict[str, set[int]] = {}
        for p in problems or ():
            by_kind.setdefault(p.kind, set()).add(p.index)
        return DataSummary(
            n_bags=self.n_bags,
            n_instances=self.n_instances,
            n_features=self.n_features,
            n_classes=self.n_classes,
            class_names=list(self.class_names),
            class_ids=list(self.class_ids),
            instances_per_bag=Spread(int(sizes.min()), float(np.median(sizes)), int(sizes.max())),
            label_set_sizes=None if sets is None else dict(sorted(Counter(len(s) for s in sets).items())),
            bags_per_class=None if sets is None else self.label_matrix().sum(axis=0).tolist(),
            n_unlabelled_instances=(
                None
                if self.instance_labels is None
                else int(sum(np.sum(y == UNLABELLED) for y in self.instance_labels))
            ),
            n_bags_with_problems=None if problems is None else len({p.index for p in problems}),
            problems_by_kind={kind: len(bags) for kind, bags in by_kind.items()},
        )

    def label_matrix(self) -> np.ndarray:
        """(B, C) 0/1 bag label matrix."""
        if self.label_sets is None:
            raise ValueError("this MIMLData has no bag label sets: give label_sets for a label matrix")
        y = np.zeros((self.n_bags, self.n_classes), np.int64)
        for b, s in enumerate(self.label_sets):
            y[b, s] = 1
        return y

    def subset(self, indices: Sequence[int] | np.ndarray) -> MIMLData:
        """The bags at ``indices`` (in that order), with their labels and ids."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if idx.size and (idx.min() < -self.n_bags or idx.max() >= self.n_bags):
            raise ValueError(f"bag indices must lie in [0, {self.n_bags})")
        pick = [int(i) for i in idx]
        return replace(
            self,
            bags=[self.bags[i] for i in pick],
            label_sets=None if self.label_sets is None else [self.label_sets[i] for i in pick],
            instance_labels=None if self.instance_labels is None else [self.instance_labels[i] for i in pick],
            bag_ids=[self.bag_ids[i] for i in pick],
        )

    def drop_features(self, names: Iterable[str]) -> MIMLData:
        """These bags without the features called ``names`` (``linear_dependencies`` says which to drop)."""
        drop = list(dict.fromkeys(str(s) for s in names))
        unknown = [s for s in drop if s not in self.feature_names]
        if unknown:
            raise ValueError(f"no feature named {unknown}: the features are {self.feature_names}")
        keep = [j for j, s in enumerate(self.feature_names) if s not in drop]
        if not keep:
            raise ValueError(f"dropping {drop} would leave no feature: keep at least one")
        return replace(
            self, bags=[x[:, keep] for x in self.bags], feature_names=[self.feature_names[j] for j in keep]
        )

    def linear_dependencies(self) -> LinearDependencies:
        """Which features are affine combinations of the others, over every instance (``collinearity``)."""
        return linear_dependencies(np.concatenate(self.bags), self.feature_names)

    # -- union violations ----------------------------------------------------

    def validate(self, leak: bool = False, novel: bool = False) -> list[BagProblem]:
        """Every bag that breaks the union assumption, one entry per problem.

        Zero-likelihood bags (empty, empty label set, fewer instances than
        labels) make fitting impossible. With instance labels, also bags
        where a bag label has no instance or an instance label is missing
        from the bag's set; unlabelled instances (-1) may carry any label of
        their bag (``union_problems``). Nothing is changed; see ``drop_impossible``.
        Bags without label sets have nothing to break: ``[]``. ``leak`` and
        ``novel``: judge the bags under the relaxed model (``ORLR(leak=...)``
        makes more labels than instances possible, ``ORLR(novel_class=True)``
        an empty label set).
        """
        if self.label_sets is None:
            return []  # nothing to check a bag against
        return union_problems(self.bags, self.label_sets, self.instance_labels, self.bag_ids, leak, novel)

    def impossible_bags(self, leak: bool = False, novel: bool = False) -> list[int]:
        """Sorted indices of the bags whose likelihood is zero (``validate``'s "zero_likelihood").

        Bags whose instance labels disagree with their set are reported by
        ``validate`` but are not impossible: fitting never sees instance
        labels (the published HJA data have such bags; the paper fits them).
        """
        return sorted({p.index for p in self.validate(leak, novel) if p.kind == "zero_likelihood"})

    def drop_impossible(self, leak: bool = False, novel: bool = False) -> tuple[MIMLData, list[int]]:
        """``(clean_data, dropped_bag_indices)``: the data without the ``impossible_bags``."""
        bad = self.impossible_bags(leak, novel)
        keep = np.setdiff1d(np.arange(self.n_bags), bad)
        if keep.size == 0:
            raise ValueError("every bag has likelihood zero under the union model; nothing would be left")
        return self.subset(keep), bad

    def check_fittable(self, leak: bool = False, novel: bool = False) -> None:
        """Raise a ValueError listing the ``impossible_bags``, or saying there are no label sets."""
        if self.label_sets is None:
            raise ValueError(
                "this MIMLData has no bag label sets, and fitting needs one per bag: give label_sets"
            )
        bad = self.impossible_bags(leak, novel)
        if bad:
            named = [self.bag_ids[b] for b in bad]
            ids = "" if named == bad else f"; ids {named[:20]}"
            shown = "; ".join(self._impossible_reasons(bad))
            raise ValueError(
                f"{len(bad)} bag(s) break the union assumption (indices {bad[:20]}"
                f"{', …' if len(bad) > 20 else ''}{ids}): {shown}. Inspect them with validate(), or "
                "remove them with `data, dropped = data.drop_impossible()`"
            )

    def _impossible_reasons(self, bad: list[int]) -> list[str]:
        """Each reason a bag of ``bad`` has likelihood zero, said once, with up to 5 of its bags."""
        groups: dict[str, list[str]] = {}
        for b in bad:
            n_labels, n_instances = len(self.label_sets[b]), len(self.bags[b])
            name = str(self.bag_ids[b])
            if n_instances == 0:
                groups.setdefault("no instance", []).append(name)
            elif n_labels == 0:
                groups.setdefault("an empty label set", []).append(name)
            else:
                groups.setdefault("more labels than instances", []).append(
                    f"{name}: {n_labels} labels, {n_instances} instance(s)"
                )
        why = {
            "no instance": "every bag needs one",
            "an empty label set": "the union gives every bag a label (ORLR(novel_class=True) allows none)",
            "more labels than instances": "each instance carries one label, so the likelihood is exactly "
            "zero (ORLR(leak=...) lets a label leak without an instance)",
        }
        out = []
        for kind, names in groups.items():
            more = f", and {len(names) - 5} more" if len(names) > 5 else ""
            out.append(f"{len(names)} with {kind} ({'; '.join(names[:5])}{more}): {why[kind]}")
        return out

    # -- splits and scaling ----------------------------------------------------

    def train_test_split(self, test_size: float = 0.25, seed: int = 0) -> tuple[MIMLData, MIMLData]:
        """Seeded random split of the bags (never of a bag's instances)."""
        n_test = int(round(test_size * self.n_bags)) if 0 < test_size < 1 else int(test_size)
        if not 1 <= n_test < self.n_bags:
            raise ValueError(f"test_size={test_size} leaves no training or no test bags of {self.n_bags}")
        perm = np.random.default_rng(seed).permutation(self.n_bags)
        return self.subset(np.sort(perm[n_test:])), self.subset(np.sort(perm[:n_test]))

    def kfold(self, n_splits: int = 10, seed: int = 0) -> Iterator[tuple[MIMLData, MIMLData]]:
        """Seeded K-fold over bags: yields ``(train, test)``; each bag is tested once."""
        for train, test in self.kfold_indices(n_splits, seed):
            yield self.subset(train), self.subset(test)

    def kfold_indices(self, n_splits: int = 10, seed: int = 0) -> list[tuple[np.ndarray, np.ndarray]]:
        """The ``(train, test)`` bag indices of ``kfold``."""
        if not 2 <= n_splits <= self.n_bags:
            raise ValueError(f"n_splits={n_splits}: need 2 <= n_splits <= {self.n_bags} bags")
        folds = np.array_split(np.random.default_rng(seed).permutation(self.n_bags), n_splits)
        return [
            (np.sort(np.concatenate(folds[:k] + folds[k + 1 :])), np.sort(folds[k])) for k in range(n_splits)
        ]
