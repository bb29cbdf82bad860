"""Shapes: annotations, shape expressions, their compiler, evaluation and the batch tracker."""
