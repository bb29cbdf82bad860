"""The parts of ``benchmarks/compare_peers.py``: the models, the tool calls, the evaluation of a produced model,
the peers and their venv, and the timed head to head."""
