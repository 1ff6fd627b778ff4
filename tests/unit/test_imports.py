"""How the modules of src/commsched import each other (docs/design.md):

- the pure stages (cost, sim, planners, scale, report, formats, ...) never import torch;
- no import circles between modules, counting imports inside functions too (issue 32, item 4);
- command-line parsing lives in the one click CLI (commsched.cli): no other module builds an
  argparse parser.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "commsched"
PURE = ["cost", "sim", "planners", "scale", "report", "calibrate", "formats", "types.py", "errors.py", "profile/devices.py",
        "runtime/validate/config.py", "runtime/validate/memory.py",
        "profile/estimate.py", "profile/__init__.py", "models/__init__.py", "models/inventory_types.py", "models/names.py", "nccl_tuner"]


def test_pure_modules_have_no_torch_import_statement():
    offenders = []
    for entry in PURE:
        path = SRC / entry
        assert path.exists(), f"{entry} is listed as pure but does not exist"
        for f in [path] if path.suffix == ".py" else sorted(path.rglob("*.py")):
            for node in ast.walk(ast.parse(f.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module:
                    names = [node.module]
                if any(n == "torch" or n.startswith(("torch.", "torchvision")) for n in names):
                    offenders.append(f"{f.relative_to(SRC)}:{node.lineno}")
    assert not offenders, offenders


def test_importing_the_pure_stages_loads_no_torch():
    code = (
        "import sys\n"
        "import commsched.cost, commsched.sim, commsched.sim.analytic, commsched.planners, commsched.scale\n"
        "import commsched.planners.compare, commsched.formats.io, commsched.report.trace, commsched.report.plots, commsched.report.html\n"
        "import commsched.profile.estimate, commsched.models, commsched.cli.main, commsched.nccl_tuner, commsched.planners.whatif\n"
        "import commsched.calibrate, commsched.calibrate.report, commsched.calibrate.stats, commsched.calibrate.semantics_fit\n"
        "import commsched.cost.resource_samples, commsched.formats.specs, commsched.report.outputs, commsched.planners.configure\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'torchvision')))\n"
        "assert not bad, bad[:5]\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr


# --- the import graph ----------------------------------------------------------------------------


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_only(tree: ast.Module) -> set[int]:
    """Ids of the nodes under ``if TYPE_CHECKING:``: never executed, so never a circle."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return skip


def _imports(module: str, path: Path, packages: set[str]):
    """(imported module or package, name imported from it or None, whether at module level) for every
    import statement of ``module``, inside functions too, relative ones resolved."""
    tree = ast.parse(path.read_text())
    top = {id(n) for n in tree.body}
    skip = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name, None, id(node) in top
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                pkg = module if module in packages else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    pkg = pkg.rpartition(".")[0]
                base = f"{pkg}.{base}" if base else pkg
            for a in node.names:
                yield base, a.name, id(node) in top


def import_graph(root: Path = SRC) -> dict[str, set[str]]:
    """Module -> the commsched modules it imports (anywhere in it). ``from package import name``
    counts as importing the submodule that defines ``name`` when the package's ``__init__`` only
    re-exports it; a package's own re-exports of its submodules are no edges (importing
    ``package.sub`` runs the package's ``__init__`` first, which is not a circle of the code's)."""
    files = {_module_name(p, root): p for p in root.rglob("*.py")}
    packages = {_module_name(p, root) for p in root.rglob("__init__.py")}
    reexports: dict[str, dict[str, str]] = {}
    for pkg in packages:
        reexports[pkg] = {
            name: base for base, name, top in _imports(pkg, files[pkg], packages) if name and top and base.startswith(pkg + ".")
        }

    def resolve(base: str, name: str | None) -> str | None:
        seen = set()
        while True:
            if name and f"{base}.{name}" in files:
                return f"{base}.{name}"
            if not (name and base in packages and name in reexports[base]) or base in seen:
                return base if base in files else None
            seen.add(base)
            base = reexports[base][name]

    graph: dict[str, set[str]] = {m: set() for m in files}
    for module, path in files.items():
        for base, name, top in _imports(module, path, packages):
            if base.split(".")[0] != "commsched":
                continue
            if module in packages and top and name and base.startswith(module + "."):
                continue  # the package re-exports its submodule's name
            target = resolve(base, name)
            if target is not None and target != module:
                graph[module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_circles_through_function_level_imports(tmp_path):
    """The finder itself: a circle closed by an import inside a function is one, a package's
    re-export is not, and ``from package import name`` leads to the module that defines ``name``."""
    pkg = tmp_path / "commsched"
    (pkg / "cost").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "cost" / "__init__.py").write_text("from commsched.cost.models import Model\nfrom commsched.cost.fit import fit\n")
    (pkg / "cost" / "models.py").write_text("class Model: ...\ndef load():\n    from commsched.cost.fit import fit\n")
    (pkg / "cost" / "fit.py").write_text("from commsched.cost import Model\ndef fit(): ...\n")
    (pkg / "cost" / "alone.py").write_text("from .models import Model\n")
    graph = import_graph(pkg)
    assert graph["commsched.cost.fit"] == {"commsched.cost.models"}  # through the package's re-export
    assert graph["commsched.cost"] == set()  # re-exports are no edges
    assert graph["commsched.cost.alone"] == {"commsched.cost.models"}  # relative import resolved
    assert cycles(graph) == [["commsched.cost.fit", "commsched.cost.models"]]
    (pkg / "cost" / "models.py").write_text("class Model: ...\n")
    assert cycles(import_graph(pkg)) == []


def test_no_import_circles_between_modules():
    graph = import_graph()
    assert len(graph) > 50 and "commsched.cli.main" in graph["commsched.__main__"]
    found = cycles(graph)
    assert not found, "\n".join(" <-> ".join(c) + ": " + "; ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)


def test_the_circles_of_issue_32_stay_broken():
    """cost.models <-> cost.hierarchical (JSON parsing now in cost.cost_json) and
    runtime.bench_resources <-> runtime.gpu_bench (the samples now in cost.resource_samples)."""
    graph = import_graph()
    assert "commsched.cost.hierarchical" not in graph["commsched.cost.models"]
    assert "commsched.runtime.gpu_bench" not in graph["commsched.cost.resource_samples"]
    assert "commsched.cost.resource_samples" in graph["commsched.runtime.gpu_bench"]
    assert "commsched.runtime.bench_resources" not in graph


def test_only_the_cli_parses_command_lines():
    """The argparse mains that lived inside library modules (bench_comm, bench_resources, emulate)
    are commands of the one click CLI: no module outside commsched.cli imports argparse."""
    offenders = []
    for f in sorted(SRC.rglob("*.py")):
        if f.relative_to(SRC).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(f.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module] if isinstance(node, ast.ImportFrom) else []
            if "argparse" in names:
                offenders.append(f"{f.relative_to(SRC)}:{node.lineno}")
    assert not offenders, offenders


def test_moved_modules_still_import_under_their_old_names_with_a_deprecation_warning():
    """Issue 32: modules moved into their layer's package; the old spelling still works and says where."""
    import subprocess
    import sys

    from commsched import MOVED_MODULES

    code = (
        "import importlib, warnings\n"
        "from commsched import MOVED_MODULES\n"
        "for old, new in MOVED_MODULES.items():\n"
        "    with warnings.catch_warnings(record=True) as w:\n"
        "        warnings.simplefilter('always')\n"
        "        got = importlib.import_module(old)\n"
        "    assert got is importlib.import_module(new), (old, new)\n"
        "    assert any(issubclass(x.category, DeprecationWarning) and new in str(x.message) for x in w), (old, w)\n"
        "print(len(MOVED_MODULES))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == str(len(MOVED_MODULES)), r.stderr[-2000:]
