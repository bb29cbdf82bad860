"""``python -m patchspec``: the same command line as ``patchspec``."""

from patchspec.cli import script

script()
