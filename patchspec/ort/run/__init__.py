"""The ``run`` verifier's work: a case's inputs, its references, the comparison of each output and
the verdict over the rows. It imports the shared modules of ``patchspec.ort``, never ``lint/``."""
