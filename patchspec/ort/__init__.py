"""ONNX Runtime: the one session builder and what both verifiers share (providers, settings, the
environment report); the run verifier's work is in ``run/``, the shape lint's in ``lint/``."""
