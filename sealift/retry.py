"""The one retry policy: bounded attempts with capped exponential backoff and jitter."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


class Retryable(Exception):
    """Raised by an operation to ask for another attempt; ``after`` honours Retry-After."""

    def __init__(self, reason: str, *, after: float | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.after = after


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently to retry a transient failure."""

    attempts: int = 6
    base_delay: float = 0.5
    max_delay: float = 20.0

    def delay(self, attempt: int, after: float | None = None) -> float:
        """Seconds to wait before attempt number ``attempt + 1`` (``attempt`` counts from 1)."""
        if after is not None:
            return min(max(after, 0.0), self.max_delay)
        backoff = min(self.max_delay, self.base_delay * (2 ** (attempt - 1)))
        # Full jitter keeps parallel workers from retrying in lockstep against one server.
        return random.uniform(backoff / 2, backoff)

    def run(
        self,
        operation: Callable[[], T],
        *,
        on_retry: Callable[[int, Retryable], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> T:
        """Run ``operation`` until it returns or raises something other than :class:`Retryable`.

        The last :class:`Retryable` is re-raised once the attempts are spent, so the caller turns
        it into the user-facing error it knows how to word.
        """
        attempt = 1
        while True:
            try:
                return operation()
            except Retryable as problem:
                if attempt >= self.attempts:
                    raise
                if on_retry is not None:
                    on_retry(attempt, problem)
                sleep(self.delay(attempt, problem.after))
                attempt += 1
