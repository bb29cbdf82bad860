"""Runs: the engine that applies a spec, and the staging that writes outputs atomically."""
