"""The one exception type users see.

Every validation failure raises :class:`CommschedError` with a message that names the bad value;
the CLI prints it as one line on stderr and exits with code 2.
"""

from __future__ import annotations


class CommschedError(ValueError):
    """Bad input: a file, a number, a name. The message says which and why."""
