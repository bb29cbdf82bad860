"""The commands of ``patchspec``: one module per command (or pair of commands), each a thin click
shell over the engine. ``patchspec.cli`` gathers them into the group and turns errors into exit codes;
``context`` holds what every command shares."""
