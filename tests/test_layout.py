"""The layout is the architecture: no source file over 500 lines, no import cycle, data/'s stages import only from
themselves and the stages before them, nothing in data/ waits by polling, loading a model does not import the
loading pipeline, and tests/ mirrors the packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
MAX_LINES = 500
STAGES = ("util", "io", "bars", "features", "baselines", "dataset", "store", "prepare")  # data/'s stages, upstream first
HELPERS = ("data", "errors", "flags", "atomic", "lazy", "allocator", "cache", "durations")  # foxhunt.<these> data/ may import (and foxhunt)
# The pipeline's packages, upstream first; a package imports only from its own tier and the tiers before it. predict/
# (batch prediction from a saved model) sits after train/, whose out-of-memory rungs, fault hooks and raw quantiles
# it runs with, and before evaluate/, which scores what it writes; the model it loads is model/saved.py's.
LAYERS = (("data",), ("model",), ("train",), ("predict",), ("evaluate",), ("backtest", "export", "tune"), ("api",),
          ("cli",))
OVER_FOR_NOW: dict[str, str] = {}  # path under src/ -> why it may be over for now (an xfail, strict)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The foxhunt modules `name` imports, at module level or in a function; imports under `if TYPE_CHECKING:` are
    left out (they never run). `from package import name` counts as the submodule when `name` is one."""
    path = MODULES[name]
    tree = ast.parse(path.read_text())
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    typing_only = {id(x) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
                   for b in n.body for x in ast.walk(b)}
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            targets = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            targets = [(base, a.name) for a in node.names]
        else:
            continue
        for module, attr in targets:
            if module.split(".")[0] != "foxhunt":
                continue
            if attr and f"{module}.{attr}" in MODULES:
                module = f"{module}.{attr}"
            while module not in MODULES and "." in module:
                module = module.rpartition(".")[0]
            if module != name:
                out.add(module)
    return out


GRAPH = {name: imports_of(name) for name in MODULES}


@pytest.mark.parametrize("path", [
    pytest.param(p, id=str(p.relative_to(SRC)), marks=[pytest.mark.xfail(strict=True, reason=OVER_FOR_NOW[rel])]
                 if (rel := str(p.relative_to(SRC))) in OVER_FOR_NOW else [])
    for p in sorted(SRC.rglob("*.py"))])
def test_no_source_file_is_over_500_lines(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(SRC)}: {lines} lines; split it by job (at most {MAX_LINES})"


def test_no_import_cycle() -> None:
    """Tarjan's strongly connected components of the import graph: each of more than one module is a cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(GRAPH[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(GRAPH)))
    for v in sorted(GRAPH):
        if v not in index:
            visit(v)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def tier_of(name: str) -> int | None:
    """The position of a module's package in LAYERS; None for foxhunt's top-level helpers."""
    parts = name.split(".")
    return next((i for i, tier in enumerate(LAYERS) if len(parts) > 1 and parts[1] in tier), None)


def test_packages_import_only_upstream() -> None:
    """data -> model -> train -> predict -> evaluate -> backtest, export, tune -> api -> cli: nothing imports a later
    tier (a model reader that imported train/, say, would load training code to forecast)."""
    wrong = [f"{name} -> {dep}" for name, deps in GRAPH.items() if (own := tier_of(name)) is not None
             for dep in sorted(deps) if (other := tier_of(dep)) is not None and other > own]
    assert not wrong, "imports against the layer order: " + ", ".join(wrong)


def stage_of(name: str) -> int | None:
    """The position of a data module's stage in STAGES; None outside the stages (data/config.py, foxhunt.data)."""
    parts = name.split(".")
    if len(parts) >= 3 and parts[:2] == ["foxhunt", "data"] and parts[2] in STAGES:
        return STAGES.index(parts[2])
    return None


def test_every_data_module_is_in_a_stage() -> None:
    loose = [n for n in MODULES if n.startswith("foxhunt.data.") and stage_of(n) is None and n != "foxhunt.data.config"]
    assert not loose, f"data modules outside data/'s stages {STAGES}: {loose}"


def test_data_stages_import_only_upstream() -> None:
    """A stage imports its own modules, earlier stages, data/config.py and foxhunt's top-level helpers (HELPERS,
    `foxhunt.__version__`), never a later stage. data/config.py checks --calendar and --since/--until with
    bars/sessions.py and io/partitions.py inside a function: it sits below every stage that reads it and above
    those two, which read no config."""
    wrong = [f"{name} -> {dep}" for name, deps in GRAPH.items() if (own := stage_of(name)) is not None
             for dep in sorted(deps) if (other := stage_of(dep)) is not None and other > own]
    wrong += [f"{name} -> {dep}" for name, deps in GRAPH.items() if name.startswith("foxhunt.data.")
              for dep in deps if dep != "foxhunt" and dep.split(".")[1] not in HELPERS]
    assert not wrong, "imports against the stage order " + " < ".join(STAGES) + ": " + ", ".join(wrong)


def test_loading_a_model_does_not_import_the_loading_pipeline() -> None:
    code = ("import sys, foxhunt.model.saved; print(sorted(m for m in ('foxhunt.data.prepare.driver', "
            "'foxhunt.data.bars.load', 'foxhunt.data.io.read') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"], out.stdout


def test_loading_or_exporting_a_model_imports_no_training_code() -> None:
    """The model's saved form lives beside the model (model/saved.py): a reader of a model (export, the Python API,
    predict) does not load train/ to read one."""
    code = ("import sys, foxhunt.model.saved, foxhunt.export.onnx; "
            "print(sorted(m for m in sys.modules if m.startswith('foxhunt.train')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["[]"], out.stdout


def test_no_two_classes_share_a_name() -> None:
    """One name, one class: two `Forecaster`s (the Python API's and batch prediction's) had readers guess which."""
    where: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                where.setdefault(node.name, []).append(f"{path.relative_to(SRC)}:{node.lineno}")
    twins = {name: places for name, places in where.items() if len(places) > 1}
    assert not twins, f"classes sharing a name: {twins}"


def test_no_module_of_the_data_pipeline_waits_by_sleeping() -> None:
    """Processes and threads of the data pipeline wait on futures (concurrent.futures), never by polling: no call to
    a `sleep` under src/foxhunt/data."""
    sleeping = []
    for path in sorted((SRC / "foxhunt" / "data").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name == "sleep":
                    sleeping.append(f"{path.relative_to(SRC)}:{node.lineno}")
    assert not sleeping, f"polling: {sleeping}"


# Where each record of a prepared dataset may be made: built by the one pipeline (data/prepare: its sink makes the
# dataset, its fit the transform), or read back from what it wrote (a store's files, a saved transform).
MADE_IN = {
    "PreparedData": {"foxhunt/data/prepare/sink.py", "foxhunt/data/store/read.py"},
    "WindowedData": {"foxhunt/data/prepare/sink.py", "foxhunt/data/store/read.py"},
    "FittedTransform": {"foxhunt/data/prepare/fit.py", "foxhunt/data/dataset/types.py"},
}


def test_one_pipeline_builds_the_prepared_data() -> None:
    """No function but the one pipeline's builds a prepared dataset or fits a transform: a second driver would be a
    second place to pay for every new input."""
    made = []
    for path in sorted(SRC.rglob("*.py")):
        rel = str(path.relative_to(SRC))
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
                if name in MADE_IN and rel not in MADE_IN[name]:
                    made.append(f"{rel}:{node.lineno} makes {name}")
    assert not made, "prepared data made outside the pipeline: " + ", ".join(made)


TESTS = SRC.parent / "tests"
NOT_PACKAGES = {"fixtures", "docs"}  # tests/ folders that test no one package: the fixture files, the docs pages


def test_tests_mirror_the_packages() -> None:
    """A test of data/bars/ lives in tests/data/bars/: the folder a test sits in says what it tests."""
    strays = [str(d.relative_to(TESTS)) for d in sorted(TESTS.rglob("*"))
              if d.is_dir() and d.name != "__pycache__" and d.relative_to(TESTS).parts[0] not in NOT_PACKAGES
              and not (SRC / "foxhunt" / d.relative_to(TESTS)).is_dir()]
    assert not strays, f"tests/ folders with no package of that path under src/foxhunt: {strays}"


MAX_PARAMETERS = 9
# "path:function" -> why it may take ten or more
MANY_PARAMETERS_BY_DESIGN: dict[str, str] = {
    "foxhunt/data/dataset/batch.py:from_dense": "its ten tensors are the dense form itself: a record would rename them",
}


def _parameter_counts() -> dict[str, int]:
    counts = {}
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                names = [p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs)]
                counts[f"{path.relative_to(SRC)}:{node.name}"] = len([n for n in names if n not in ("self", "cls")])
    return counts


def test_no_function_takes_ten_parameters() -> None:
    """Parameters that travel together are a record (a frozen dataclass or a config); ten loose ones are a call
    nobody can read or change safely."""
    many = {name: n for name, n in _parameter_counts().items() if n > MAX_PARAMETERS}
    unexpected = {name: n for name, n in many.items() if name not in MANY_PARAMETERS_BY_DESIGN}
    stale = sorted(set(MANY_PARAMETERS_BY_DESIGN) - set(many))
    assert not unexpected, f"functions with more than {MAX_PARAMETERS} parameters: {unexpected}; take a record"
    assert not stale, f"MANY_PARAMETERS_BY_DESIGN names functions that no longer take that many: {stale}"
