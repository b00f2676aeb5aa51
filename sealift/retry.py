"""The one retry policy: bounded attempts with capped exponential backoff and jitter."""

from __future__ import annotations

import random
import threading
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


class AdaptiveConcurrency:
    """How many transfers may run at once: halved when a server pushes back, regrown slowly.

    Retries alone keep hammering an overloaded registry with the same number of streams;
    lowering concurrency on each retry (additive increase, multiplicative decrease, as TCP does)
    lets it recover.
    """

    def __init__(self, maximum: int, *, regrow_after: int = 4) -> None:
        self.maximum = max(1, maximum)
        self.limit = self.maximum
        self._in_use = 0
        self._successes = 0
        self._regrow_after = regrow_after
        self._condition = threading.Condition()

    def __enter__(self) -> AdaptiveConcurrency:
        with self._condition:
            while self._in_use >= self.limit:
                self._condition.wait()
            self._in_use += 1
        return self

    def __exit__(self, kind: object, value: object, traceback: object) -> None:
        with self._condition:
            self._in_use -= 1
            if kind is None:
                self._successes += 1
                if self._successes >= self._regrow_after and self.limit < self.maximum:
                    self.limit += 1
                    self._successes = 0
            self._condition.notify_all()

    def back_off(self) -> None:
        """A server asked us to slow down (or failed): halve the number of parallel transfers."""
        with self._condition:
            self.limit = max(1, self.limit // 2)
            self._successes = 0
