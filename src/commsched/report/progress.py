"""Progress bars for long work: rich on stderr, or nothing when disabled (another rank) or when stderr
is not a terminal (a pipe, a log file, a test), where a transient bar would leave a blank line behind."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager


class _Bar:
    def __init__(self, prog=None, task=None) -> None:
        self._prog, self._task = prog, task

    def advance(self, steps: int = 1) -> None:
        if self._prog is not None:
            self._prog.advance(self._task, steps)

    def label(self, text: str) -> None:
        if self._prog is not None:
            self._prog.update(self._task, description=text)


@contextmanager
def progress(enabled: bool, description: str, total: int) -> Iterator[_Bar]:
    """Yield a bar with ``advance(steps=1)`` and ``label(text)``; both do nothing when not ``enabled``
    or when stderr is not a terminal."""
    from rich.console import Console

    console = Console(stderr=True)
    if not enabled or not console.is_terminal:
        yield _Bar()
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as prog:
        yield _Bar(prog, prog.add_task(description, total=total))
