"""The one family of user-facing failures.

Every failure a user can cause or meet is a :class:`SealiftError` subclass that carries a
one-line message naming the input and a hint saying what to do. The CLI prints
``error: MESSAGE (hint: HINT)`` and exits with the family's code, so scripts can tell bad
input from tampering from a network fault.
"""

from __future__ import annotations


class SealiftError(Exception):
    """Base class: a one-line message and a hint, mapped by the CLI to an exit code."""

    exit_code = 1
    family = "error"

    def __init__(self, message: str, *, hint: str = "") -> None:
        # Newlines would break the one-line contract in logs and CI output.
        self.message = " ".join(message.split())
        self.hint = " ".join(hint.split())
        super().__init__(self.one_line())

    def one_line(self) -> str:
        """The message and hint as the single line the CLI prints."""
        return f"{self.message} (hint: {self.hint})" if self.hint else self.message


class InputError(SealiftError):
    """The user's input is wrong: a bundle file, a flag, a path, a chart, a model folder."""

    exit_code = 2
    family = "input"


class IntegrityError(SealiftError):
    """Content does not match what was promised: a digest, a size, a missing or extra blob."""

    exit_code = 3
    family = "integrity"


class RemoteError(SealiftError):
    """A server failed or refused: unreachable registry, bad credentials, too many retries."""

    exit_code = 4
    family = "remote"


class ResourceError(SealiftError):
    """The local machine cannot do it: not enough space, a permission, a missing tool."""

    exit_code = 5
    family = "resource"


class StallError(SealiftError):
    """The cluster did not reach the wanted state in time: a Pending pod, a stuck rollout."""

    exit_code = 6
    family = "stalled"
