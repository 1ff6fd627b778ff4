"""The README's commands run, its links and the docs' links resolve, and its layout is the code's
(issue 32, items 1 and 6).

The convention, stated in a comment at the top of README.md: every line of a ```bash block in the
README is a command run in order, in one fresh directory, and must exit 0; commands that need
torchrun, root, a GPU or minutes (``HELP_ONLY``) are checked against their ``--help`` instead: the
command exists and takes every flag written. In docs/*.md every ```bash line is checked that way.
```python blocks must compile. Files a README command reads that the README does not make are the
test's fixtures (``GIVEN``).
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
SRC = ROOT / "src" / "commsched"
MAX_README_LINES = 300

COMMANDS = {
    "plan", "profile", "scale", "layers", "presets", "report", "nccl-tuner",
    "validate", "emulate", "bench-comm", "bench-resources",
}
# run only as --help: they need torchrun, root (network namespaces), a GPU, or minutes
HELP_ONLY = {"validate", "emulate", "bench-comm", "bench-resources"}
HELP_ONLY_FLAGS = {"--measure"}  # profile --measure times real training steps
# files the README's commands read without making them
GIVEN = {"trace.json": ROOT / "tests" / "fixtures" / "gpu_nccl_trace.json"}

FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)


def blocks(text: str, lang: str) -> list[str]:
    return [body for info, body in FENCE.findall(text) if info.strip() == lang]


def command_lines(text: str) -> list[str]:
    return [ln.strip() for body in blocks(text, "bash") for ln in body.splitlines() if ln.strip() and not ln.strip().startswith("#")]


def segments(tokens: list[str]) -> list[tuple[str, list[str]]]:
    """Each ``commsched <command>`` in a command line (also after ``-m`` and inside ``emulate ... --``)
    with the flags written for it: the tokens after it up to a bare ``--`` or the next commsched."""
    starts = [i for i, t in enumerate(tokens[:-1]) if t == "commsched" and tokens[i + 1] in COMMANDS]
    out = []
    for n, i in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else len(tokens)
        rest = tokens[i + 2:end]
        if "--" in rest:
            rest = rest[: rest.index("--")]
        out.append((tokens[i + 1], [t.split("=")[0] for t in rest if t.startswith("--") and len(t) > 2]))
    return out


def tokens_of(line: str) -> list[str]:
    return shlex.split(line, comments=True)


def run_commsched(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "commsched", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@lru_cache(maxsize=None)
def help_text(command: str) -> str:
    r = run_commsched([command, "--help"], ROOT)
    assert r.returncode == 0, f"commsched {command} --help failed: {r.stderr}"
    return r.stdout


def check_flags(line: str) -> None:
    found = segments(tokens_of(line))
    assert found, f"no commsched command in {line!r}"
    for command, flags in found:
        text = help_text(command)
        for flag in flags:
            assert re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text), f"commsched {command} has no {flag} ({line!r})"


def help_only(line: str) -> bool:
    tokens = tokens_of(line)
    return tokens[0] != "commsched" or any(c in HELP_ONLY for c, _ in segments(tokens)) or bool(HELP_ONLY_FLAGS & set(tokens))


def test_readme_is_a_guide_of_at_most_300_lines():
    n = len(README.read_text().splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines; depth belongs in docs/"


def test_readme_states_its_test_convention():
    text = README.read_text()
    assert "tests/integration/test_readme.py" in text and "```bash" in text


def test_readme_commands_run(tmp_path):
    lines = command_lines(README.read_text())
    ran = [ln for ln in lines if not help_only(ln)]
    assert len(ran) >= 8, "the README's workflows show commands that run"
    for name, src in GIVEN.items():
        shutil.copy(src, tmp_path / name)
    for line in lines:
        check_flags(line)
        if help_only(line):
            continue
        tokens = tokens_of(line)
        assert tokens[0] == "commsched", f"a run README line is one commsched command: {line!r}"
        r = run_commsched(tokens[1:], tmp_path)
        assert r.returncode == 0, f"{line!r} exited {r.returncode}: {r.stderr[-2000:]}"
    # what the first workflow says `plan` writes
    for f in ("plan.json", "ddp_options.json", "trace.json", "gantt.png", "report.html", "report-data.json"):
        assert (tmp_path / "out" / f).is_file(), f


def test_help_only_commands_are_the_expensive_ones():
    lines = command_lines(README.read_text())
    checked = [ln for ln in lines if help_only(ln)]
    # the validate workflow and profile --measure are shown, and checked against --help only
    assert any("validate" in ln for ln in checked) and any("--measure" in ln for ln in checked)
    assert not any(help_only(ln) for ln in ["commsched plan --out out", "commsched scale --model resnet50"])
    assert all(help_only(ln) for ln in ["torchrun -m commsched bench-comm --out c.json", "commsched emulate --nodes 2 -- -m x"])


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_docs_commands_exist_with_their_flags(doc):
    for line in command_lines(doc.read_text()):
        check_flags(line)


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_python_blocks_compile(doc):
    for body in blocks(doc.read_text(), "python"):
        compile(body, str(doc), "exec")


def test_flag_check_catches_a_flag_a_command_does_not_take():
    with pytest.raises(AssertionError, match="--no-such-flag"):
        check_flags("commsched plan --no-such-flag 3")
    with pytest.raises(AssertionError, match="--bogus"):
        check_flags("commsched emulate --nodes 2 -- -m commsched validate --bogus")


# ---- links ---------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: the rendered text lower-cased, punctuation other than - and _
    dropped, spaces turned into hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text = FENCE.sub("", path.read_text())
    for m in re.finditer(r"^#{1,6}[ \t]+(.+?)[ \t]*#*$", text, re.M):
        s = slug(m.group(1))
        n = seen.get(s, 0)
        seen[s] = n + 1
        out.add(s if n == 0 else f"{s}-{n}")
    return out


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def links(path: Path) -> list[str]:
    text = FENCE.sub("", path.read_text())
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("doc", [README, *DOCS], ids=lambda p: p.name)
def test_relative_links_resolve(doc):
    bad = []
    for target in links(doc):
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading with that anchor in {dest.name}")
    assert not bad, bad


def test_link_checker_sees_a_broken_link(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n[x](b.md) [y](#title) [z](#nope) [w](https://e.org/x)\n")
    ok = [t for t in links(tmp_path / "a.md")]
    assert ok == ["b.md", "#title", "#nope"]
    assert "title" in anchors(tmp_path / "a.md") and "nope" not in anchors(tmp_path / "a.md")
    assert slug("6. `optimal` applied through stock DDP's defaults (issue 11)") == "6-optimal-applied-through-stock-ddps-defaults-issue-11"


# ---- layout --------------------------------------------------------------------------------------


def packages() -> set[str]:
    """The packages and top-level modules under src/commsched (what a layout must name)."""
    names = {p.name + "/" for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    names |= {p.name for p in SRC.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    return names


def layout_entries(text: str, heading: str) -> dict[str, str]:
    """The layout block under ``heading``: each top-level entry of src/commsched/ (two spaces in)
    with the text that describes it (its line and the lines indented under it)."""
    section = text.split(heading, 1)[1]
    body = FENCE.search(section).group(2)
    lines = body.split("src/commsched/\n", 1)[1].splitlines()
    entries: dict[str, str] = {}
    current = None
    for ln in lines:
        m = re.match(r"^  (\S+)(\s.*)?$", ln)
        if m:
            current = m.group(1)
            entries[current] = m.group(2) or ""
        elif ln.startswith("   ") and current is not None:
            entries[current] += " " + ln.strip()
        else:
            break  # the block's next top-level entry (schemas/, tests/, ...)
    return entries


def test_readme_layout_names_every_package_and_no_other():
    named = set(layout_entries(README.read_text(), "## Layout"))
    assert named == packages(), (sorted(named - packages()), sorted(packages() - named))


def test_design_layout_names_every_package_and_module():
    entries = layout_entries((ROOT / "docs" / "design.md").read_text(), "## Package layout")
    assert set(entries) == packages(), (sorted(set(entries) - packages()), sorted(packages() - set(entries)))
    missing, unknown = [], []
    for pkg, text in entries.items():
        if not pkg.endswith("/"):
            continue
        d = SRC / pkg
        named = set(re.findall(r"\b(\w+\.(?:py|c))\b", text)) | set(re.findall(r"\b(\w+/)", text))
        for n in named:
            if not (d / n).exists():
                unknown.append(pkg + n)
        if pkg == "cli/":  # "main.py and one module per command"
            continue
        for f in d.iterdir():
            if f.suffix in (".py", ".c") and f.name not in ("__init__.py", "__main__.py") and f.name not in named:
                missing.append(pkg + f.name)
            elif f.is_dir() and (f / "__init__.py").exists() and f.name + "/" not in named:
                missing.append(pkg + f.name + "/")
    assert not unknown, f"docs/design.md names modules that do not exist: {unknown}"
    assert not missing, f"docs/design.md's layout leaves out: {missing}"


# ---- the drawing of the house --------------------------------------------------------------------


def drawing_rows() -> list[tuple[str, str]]:
    """The layers of docs/design.md's drawing, top to bottom: (package or module, the row's text)."""
    text = (ROOT / "docs" / "design.md").read_text().split("## The house", 1)[1]
    body = FENCE.search(text).group(2)
    rows: list[tuple[str, str]] = []
    for ln in body.splitlines():
        m = re.match(r"^  \| (\S+)\s+(.*?)\s*\|$", ln)
        if m:
            rows.append((m.group(1), m.group(2)))
        elif ln.startswith("  |  ") and rows:
            rows[-1] = (rows[-1][0], rows[-1][1] + " " + ln.strip(" |"))
    return rows


def _dotted(f: Path) -> str:
    """``planners/optimal.py`` -> ``planners.optimal``; a package's ``__init__.py`` -> its name."""
    parts = f.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_rows() -> dict[str, int]:
    """Every module of commsched (dotted, relative: ``planners.optimal``) -> its row in the drawing.
    A package drawn in several rows places each module in the row that names it, and its
    ``__init__`` in its lowest row; a package drawn once holds all its modules (subpackages too)."""
    rows = drawing_rows()
    where: dict[str, list[int]] = {}
    for i, (key, _) in enumerate(rows):
        where.setdefault(key, []).append(i)
    out: dict[str, int] = {}
    for f in SRC.rglob("*.py"):
        rel = f.relative_to(SRC)
        dotted = _dotted(f)
        if len(rel.parts) == 1:
            if f.name in ("__init__.py", "__main__.py"):
                out[dotted] = -1  # `commsched` itself and `python -m commsched`: above every layer
            else:
                assert f.name in where, f"the drawing has no row for {f.name}"
                out[dotted] = where[f.name][0]
            continue
        key = rel.parts[0] + "/"
        assert key in where, f"the drawing has no row for {key}"
        idx = where[key]
        if len(idx) == 1:
            out[dotted] = idx[0]
        elif f.name == "__init__.py" and len(rel.parts) == 2:
            out[dotted] = idx[-1]
        else:
            named = [i for i in idx if re.search(rf"\b{re.escape(rel.parts[1])}\b", rows[i][1])]
            assert len(named) == 1, f"{rel}: {key} is drawn in {len(idx)} rows and {len(named)} of them name {rel.parts[1]}"
            out[dotted] = named[0]
    return out


def module_level_imports(path: Path) -> list[str]:
    """The commsched modules ``path`` imports when it is imported (not inside a function, not for
    type checking only), dotted and relative (``planners.optimal``)."""
    found: list[str] = []

    def walk(body) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                if node.module == "commsched":
                    found.extend(a.name for a in node.names)
                elif node.module.startswith("commsched."):
                    found.append(node.module.removeprefix("commsched."))
            elif isinstance(node, ast.Import):
                found.extend(a.name.removeprefix("commsched.") for a in node.names if a.name.startswith("commsched."))
            elif isinstance(node, ast.If) and "TYPE_CHECKING" not in ast.unparse(node.test):
                walk(node.body)
                walk(node.orelse)
            elif isinstance(node, ast.Try):
                walk(node.body)

    walk(ast.parse(path.read_text()).body)
    return found


def test_drawing_rows_are_the_packages():
    keys = {k for k, _ in drawing_rows()}
    assert keys == packages(), (sorted(keys - packages()), sorted(packages() - keys))


def test_imports_go_down_the_drawing():
    rows = drawing_rows()
    row_of = module_rows()
    up = []
    for f in SRC.rglob("*.py"):
        me = _dotted(f)
        for target in module_level_imports(f):
            # a name imported from a package may be a module of it or a name its __init__ defines
            t = target if target in row_of else target.rsplit(".", 1)[0] if target.rsplit(".", 1)[0] in row_of else None
            assert t is not None, f"{me} imports {target}, which is not a commsched module"
            if row_of[t] < row_of[me]:
                up.append(f"{me} ({rows[row_of[me]][0]}) imports {t} ({rows[row_of[t]][0]}), drawn above it")
    assert not up, up
