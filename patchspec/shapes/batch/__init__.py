"""set_batch's engine: follow the batch through a model (``tracker``, returning a ``trace.BatchTrace``),
decide each op by its rule (``tracker.RULES``: folds, joins, scatters, states, ranges, counts,
computed shapes), name what cannot be batched (``findings``, ``pinned``, ``coupling``) and apply the
decisions (``rewrite``). It imports ``patchspec.shapes`` (the evaluator, expressions, the compiler),
which never imports it."""
