"""The one exception the run verifier's pieces raise, with a message written for the user."""

from __future__ import annotations


class RunFailure(Exception):
    """A session cannot be built, a case cannot be fed or run; ``message`` is for the user.

    ``detail`` is the failure without the provider and path in front (onnxruntime's own words, for
    a message that quotes them), ``node`` the graph node onnxruntime named, if any.
    """

    def __init__(self, message: str, hint: str | None = None, *, detail: str = "", node: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail or message
        self.node = node

    def text(self) -> str:
        """The message with its hint, as one line of a report."""
        return self.message + (f" (hint: {self.hint})" if self.hint else "")


__all__ = ["RunFailure"]
