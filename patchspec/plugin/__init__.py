"""Plugins: the hooks, the contract a patch type or verifier implements, and the registry."""
