"""The host side of plugins: finding and loading them (``registry``) and calling their code
(``boundary``), above ``shapes/``; what a plugin is (the contract) stays in ``patchspec.plugin``."""
