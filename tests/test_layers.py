"""The package's architecture: layers that import one way, no cycles, a public API a user can type."""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "orlr_ppl"

LAYERS = {
    "dp": set(),
    "data": {"dp"},
    "model": {"dp"},
    "inference": {"dp", "model"},
    "evaluation": {"dp", "data", "inference", "features"},
    "features": set(),
    "estimators": {"dp", "data", "model", "inference", "evaluation", "features"},
}
"""What each subpackage may import from the others (itself always)."""

RUNTIME = {"_version", "_host_devices", "compilation_cache", "seeding"}
"""Top-level modules below every layer (runtime set-up, the seeding rule): they import nothing from
the package."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, typing_only: bool = False) -> set[str]:
    """Every orlr_ppl module ``path`` imports, at any depth (function-level imports included), and
    with ``typing_only`` those under ``if TYPE_CHECKING:`` too."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text())
    hints = set()
    if not typing_only:
        hints = {
            id(n)
            for block in ast.walk(tree)
            if isinstance(block, ast.If)
            and isinstance(block.test, ast.Name)
            and block.test.id == "TYPE_CHECKING"
            for n in ast.walk(block)
        }
    out = set()
    for node in ast.walk(tree):
        if id(node) in hints:
            continue
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "orlr_ppl":
                continue
            for alias in node.names:  # ``from . import x`` may name a module
                sub = f"{target}.{alias.name}"
                out.add(sub if _exists(sub) else target)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "orlr_ppl"}
    return out - {name}


def _exists(module: str) -> bool:
    rel = Path(*module.split(".")[1:])
    return (PACKAGE / rel).with_suffix(".py").is_file() or (PACKAGE / rel / "__init__.py").is_file()


def _graph(typing_only: bool = False) -> dict[str, set[str]]:
    return {_module_name(p): _imports(p, typing_only) for p in PACKAGE.rglob("*.py")}


def _layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "orlr_ppl"


def test_layers_import_only_the_layers_below_them():
    bad = []
    for module, deps in _graph().items():
        layer = _layer(module)
        for dep in deps:
            other = _layer(dep)
            if other == layer or other in RUNTIME:
                if layer in RUNTIME and other != layer:
                    bad.append(f"{module} -> {dep}")
                continue
            if layer in LAYERS and other not in LAYERS[layer]:
                bad.append(f"{module} -> {dep}")
    assert not bad, "imports against the layering:\n" + "\n".join(sorted(bad))


def test_no_import_cycles():
    """Type-hint imports count: two modules that name each other's types are one concept split in two,
    whether or not the import runs (a layer may still name a higher layer's type in a hint)."""
    graph = _graph(typing_only=True)
    state: dict[str, int] = {}
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == 1:
                cycles.append(" -> ".join(path[path.index(dep) :] + [dep]))
            elif dep not in state:
                visit(dep, path + [dep])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_layering_test_can_fail(tmp_path, monkeypatch):
    """A lower layer importing a higher one is caught: the check above is not vacuous."""
    graph = _graph()
    graph["orlr_ppl.dp.packing"] = graph["orlr_ppl.dp.packing"] | {"orlr_ppl.estimators.orlr"}
    monkeypatch.setattr(sys.modules[__name__], "_graph", lambda typing_only=False: graph)
    with pytest.raises(AssertionError, match="dp.packing -> orlr_ppl.estimators.orlr"):
        test_layers_import_only_the_layers_below_them()
    graph["orlr_ppl.dp.validation"] = graph["orlr_ppl.dp.validation"] | {"orlr_ppl.dp.packing"}
    graph["orlr_ppl.dp.packing"] = graph["orlr_ppl.dp.packing"] | {"orlr_ppl.dp.validation"}
    with pytest.raises(AssertionError, match="import cycles"):
        test_no_import_cycles()


def test_the_public_api_a_user_types():
    code = (
        "import os\n"
        "flags = os.environ.get('XLA_FLAGS')\n"
        "from orlr_ppl import ORLR, ORLRCV, EM, MAP, NUTS, SVI, RBFDictionary, MIMLData, SIM\n"
        "from orlr_ppl import MajorityClass, bag_log_likelihood, instance_posteriors, set_host_device_count\n"
        "assert os.environ.get('XLA_FLAGS') == flags, 'importing orlr_ppl changed XLA_FLAGS'\n"
        "import orlr_ppl.io, orlr_ppl.datasets, orlr_ppl.metrics, orlr_ppl.plots, orlr_ppl.diagnostics\n"
        "from orlr_ppl.metrics import instance_accuracy\n"
        "from orlr_ppl.io import read_miml_arff, read_bag_csv\n"
        "from orlr_ppl.datasets import load_letter_frost, make_miml_digits\n"
        "from orlr_ppl.diagnostics import diagnose, ConvergenceWarning\n"
        "from orlr_ppl.cross_validation import cross_validate\n"
        "assert isinstance(make_miml_digits(3), MIMLData)\n"
        "assert set_host_device_count(3) == 3 and 'device_count=3' in os.environ['XLA_FLAGS']\n"
        "import jax\n"
        "assert jax.device_count() == 3\n"
    )
    # A fresh interpreter: the modules must import from a cold start, and the device count take.
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300, env={**os.environ, "XLA_FLAGS": ""})


def test_set_host_device_count_after_jax_started_warns(monkeypatch):
    import jax.numpy as jnp

    from orlr_ppl import set_host_device_count

    jnp.zeros(1).block_until_ready()  # JAX has started in this process
    monkeypatch.delenv("XLA_FLAGS", raising=False)  # the count conftest set would return early
    with pytest.warns(RuntimeWarning, match="already started"):
        set_host_device_count(2)
    assert "device_count" not in os.environ.get("XLA_FLAGS", "")


@pytest.mark.parametrize("name", ["io", "datasets", "metrics", "plots", "diagnostics", "cross_validation"])
def test_public_modules_name_their_sources_names(name):
    """Each public module re-exports its source's objects: the same objects, listed in ``__all__``."""
    module = importlib.import_module(f"orlr_ppl.{name}")
    assert module.__all__ and all(hasattr(module, n) for n in module.__all__)


def test_dir_shows_the_public_names_only():
    """``dir(orlr_ppl)`` (tab completion) lists ``__all__`` and the public modules, not the helpers
    and subpackages that importing leaves behind (``ModuleType``, ``importlib``, ``annotations``)."""
    import orlr_ppl

    shown = set(dir(orlr_ppl))
    assert shown == set(orlr_ppl.__all__) | set(orlr_ppl.PUBLIC_MODULES)
    assert not shown & {"ModuleType", "importlib", "annotations", "dp", "estimators"}
    assert not {"ModuleType", "importlib", "annotations"} & set(vars(orlr_ppl))


def test_random_state_none_is_seed_0_everywhere():
    """One rule (``seeding``): None repeats exactly, as seed 0 does, in every seeded step."""
    import numpy as np

    from orlr_ppl import ORLR, SIM, RBFDictionary
    from orlr_ppl.datasets import make_miml_digits

    data = make_miml_digits(12, seed=0, max_size=3)
    x = np.concatenate(data.bags)
    for make in (lambda r: RBFDictionary(n_components=5, random_state=r),):
        a, b = make(None).fit(x), make(0).fit(x)
        np.testing.assert_array_equal(a.dictionary_, b.dictionary_)
        assert a.gamma_ == b.gamma_
    model = ORLR(inference="map").fit(data)
    tables = [model.set_params(random_state=r).query(data, n=4, strategy="random") for r in (None, None, 0)]
    assert tables[0].equals(tables[1]) and tables[0].equals(tables[2])
    fits = [SIM(random_state=r, n_outer=1, n_inner=5).fit(data) for r in (None, 0)]
    np.testing.assert_array_equal(fits[0].coef_, fits[1].coef_)


NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make", "_field_defaults"}
"""Underscored only to stay clear of field names: a NamedTuple's public methods."""


def _private_uses(path: Path) -> list[str]:
    """Each ``x._name`` (x not ``self``, ``cls`` or ``super()``) and ``from m import _name`` in ``path``
    whose ``_name`` the module does not define itself: another module's private name, set or called."""
    tree = ast.parse(path.read_text())
    where = path.relative_to(PACKAGE) if path.is_relative_to(PACKAGE) else path.name
    own = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                own.add(node.attr)  # an attribute this module's own classes keep
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    bad.append(f"{where}:{node.lineno}: from {node.module} import {alias.name}")
        elif isinstance(node, ast.Attribute):
            name, owner = node.attr, node.value
            if not name.startswith("_") or name.startswith("__") or name in own | NAMEDTUPLE_API:
                continue
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue  # the object's own (or inherited) implementation
            if isinstance(owner, ast.Call) and getattr(owner.func, "id", None) == "super":
                continue
            if ast.unparse(node) == "os._exit":  # documented: leave without running exit handlers
                continue
            bad.append(f"{where}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_no_module_reaches_into_another_modules_private_names():
    """Modules talk through public names: estimators, cross-validation and the CLI use what a user
    could call, and nothing sets or calls NumPyro's or scikit-learn's internals."""
    bad = [line for path in sorted(PACKAGE.rglob("*.py")) for line in _private_uses(path)]
    assert not bad, "private names reached across modules:\n" + "\n".join(bad)


def test_the_private_name_test_can_fail(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "from x import _hidden\n"
        "class A:\n    def _mine(self): self._kept = other._theirs()\n"
        "def f(a): return a._mine(), a._kept, a._replace(b=1)\n"
    )
    found = _private_uses(source)
    assert [line.split(": ", 1)[1] for line in found] == ["from x import _hidden", "other._theirs"]
