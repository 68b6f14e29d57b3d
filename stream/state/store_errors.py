"""The errors of the Redis store, apart so that its parts in other modules raise them without
importing the store (``stream.state.redis_store`` exports them too)."""

from __future__ import annotations

from typing import NoReturn

from redis.exceptions import ResponseError

from stream.errors import InfrastructureError


class Conflict(InfrastructureError, RuntimeError):
    """Someone committed to the pool between our read and our write: re-read and recompute."""


class AlreadyApplied(Conflict):
    """An optimistic commit (``check_ids``) found one of its event ids applied already: re-read with
    the event ids and recompute without them (a re-delivery is rare: the usual batch skips the read)."""


class MetaConflict(Conflict):
    """The pool was first committed (by another worker) with another system: reload and recompute."""


class StateError(InfrastructureError, RuntimeError):
    """A pool's keys hold what this version cannot use (a key of another type, a counter that is no
    number, a key format it cannot read): nothing was written; an operator must look at the pool.
    Retrying does not help, and the events are not at fault."""

    def __init__(self, pool: str, detail: str) -> None:
        super().__init__(f"pool {pool!r}: {detail}")
        self.pool = pool


def raise_state(pool: str, exc: ResponseError) -> NoReturn:
    """A script's "MMRSTATE" refusal (or a WRONGTYPE it could not foresee) as StateError; anything else as is."""
    text = str(exc)
    if "MMRSTATE" in text:
        raise StateError(pool, text[text.index("MMRSTATE") + 9:]) from exc
    if "WRONGTYPE" in text:
        raise StateError(pool, text) from exc
    raise exc
