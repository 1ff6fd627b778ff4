"""The one exception type users see.

Every validation failure raises :class:`CommschedError` with a message that names the bad value;
the CLI prints it as one line on stderr and exits with code 2.
"""

from __future__ import annotations


class CommschedError(ValueError):
    """Bad input: a file, a number, a name. The message says which and why."""


def check_flags(where: str, **flags: object) -> None:
    """Each of ``flags`` must be a flag: True or False, or what torch's C++ takes as one and configs
    often hold (numpy's bool, 0 or 1, None for False). Anything else (a string, where ``bool("no")``
    is True, or 2 or 0.5) is one error naming it; torch refuses a string in a message that dumps the
    model's tensors and names no argument."""
    for name, value in flags.items():
        numpy_bool = type(value).__module__ == "numpy" and type(value).__name__ in ("bool_", "bool")
        if not (value is None or numpy_bool or (isinstance(value, int) and value in (0, 1))):
            raise CommschedError(f"{where}: {name} must be True or False, got {type(value).__name__} {value!r}")
