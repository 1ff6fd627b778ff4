"""The one exception type users see.

Every validation failure raises :class:`CommschedError` with a message that names the bad value;
the CLI prints it as one line on stderr and exits with code 2.
"""

from __future__ import annotations


class CommschedError(ValueError):
    """Bad input: a file, a number, a name. The message says which and why."""


def check_flags(where: str, **flags: object) -> None:
    """Each of ``flags`` must be True or False: torch's C++ refuses anything else in a message that
    dumps the model's tensors and names no argument, and ``bool()`` would take "no" as True."""
    for name, value in flags.items():
        numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")  # torch's C++ takes it too
        if not isinstance(value, bool) and not numpy_bool:
            raise CommschedError(f"{where}: {name} must be True or False, got {type(value).__name__} {value!r}")
