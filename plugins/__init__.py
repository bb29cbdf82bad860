"""patchspec's built-in plugins (installed as ``patchspec_plugins``).

Each module is one plugin, registered through the ``patchspec`` entry-point group exactly as a
third-party plugin would be. Read any of them as an example to copy.
"""
