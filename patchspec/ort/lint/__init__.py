"""The shape lint behind ``patchspec inspect`` and the ``lint`` verifier: the probe, its inputs and
the report ``inspect`` shows. It imports the shared modules of ``patchspec.ort``, never ``run/``."""
