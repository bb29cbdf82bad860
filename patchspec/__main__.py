"""``python -m patchspec``: the same command line as ``patchspec``."""

import sys

from patchspec.cli import main

sys.exit(main())
