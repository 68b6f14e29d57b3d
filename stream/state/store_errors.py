"""The errors of the Redis store (stream.state.redis_store), in a module of their own so that the parts of
the store in other modules (stream.state.round_state) raise the same ones without importing the store.
``stream.state.redis_store`` exports them too."""

from __future__ import annotations

from typing import NoReturn

from redis.exceptions import ResponseError

from stream.errors import InfrastructureError


class Conflict(InfrastructureError, RuntimeError):
    """Someone committed to the pool between our read and our write: re-read and recompute."""


class AlreadyApplied(Conflict):
    """An optimistic commit (``check_ids``) found one of its event ids applied already.

    The caller re-reads with the event ids (the snapshot) and recomputes without them:
    a re-delivered batch is rare, so the usual batch skips the read entirely.
    """


class MetaConflict(Conflict):
    """The pool was first committed (by another worker) with another system: reload and recompute.

    Possible when a new pool's rounds and matches are consumed by two workers whose
    defaults differ by event kind; the first commit fixes the pool's system.
    """


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
