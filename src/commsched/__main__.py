"""``python -m commsched``: the same as the ``commsched`` command."""

import sys

from commsched.cli.main import main

sys.exit(main())
