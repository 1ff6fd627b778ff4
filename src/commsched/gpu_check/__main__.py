"""``python3 -m commsched.gpu_check OUT``: see :mod:`commsched.gpu_check.driver`."""

import sys

from commsched.gpu_check.driver import main

sys.exit(main())
