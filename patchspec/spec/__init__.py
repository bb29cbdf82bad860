"""Specs: the YAML reader (with positions), the schema and the validated Spec."""
