"""Runs: the engine that applies a spec, and the commit that writes outputs atomically."""
