"""The pure stages (cost, sim, planners, scale, report, io) never import torch (DESIGN.md)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "commsched"
PURE = ["cost", "sim", "planners", "scale", "report", "calibrate", "types.py", "errors.py", "io.py", "compare.py", "whatif.py", "devices.py",
        "runtime/validate/config.py", "runtime/validate/memory.py",
        "profile/estimate.py", "profile/__init__.py", "models/__init__.py", "models/inventory_types.py", "models/names.py", "nccl_tuner"]


def test_pure_modules_have_no_torch_import_statement():
    offenders = []
    for entry in PURE:
        path = SRC / entry
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
        "import commsched.compare, commsched.io, commsched.report.trace, commsched.report.plots, commsched.report.html\n"
        "import commsched.profile.estimate, commsched.models, commsched.cli.main, commsched.nccl_tuner, commsched.whatif\n"
        "import commsched.calibrate, commsched.calibrate.report, commsched.calibrate.stats, commsched.calibrate.semantics_fit\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith(('torch.', 'torchvision')))\n"
        "assert not bad, bad[:5]\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
