"""Progress bars for long work: rich on stderr, or nothing when disabled (another rank, a pipe)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class _Bar:
    def __init__(self, prog=None, task=None) -> None:
        self._prog, self._task = prog, task

    def advance(self) -> None:
        if self._prog is not None:
            self._prog.advance(self._task)

    def label(self, text: str) -> None:
        if self._prog is not None:
            self._prog.update(self._task, description=text)


@contextmanager
def progress(enabled: bool, description: str, total: int) -> Iterator[_Bar]:
    """Yield a bar with ``advance()`` and ``label(text)``; both do nothing when not ``enabled``."""
    if not enabled:
        yield _Bar()
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=True) as prog:
        yield _Bar(prog, prog.add_task(description, total=total))
