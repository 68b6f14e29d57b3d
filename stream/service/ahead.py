"""A pool's next step rated while the step before it commits.

Why: a large batch of one pool -- a replayed history, hundreds of rounds of thousands of
players -- is cut into steps of at most ``MMR_MAX_STEP_PLAYERS`` players, each read, rated and
committed in turn (stream.service.step). Redis spends a good part of a second applying the
commit of a step of ~50,000 beliefs, on its own core, and the next step's rating (on the numba
thread) need not wait for it: the beliefs that step starts from, if the commit lands, are known
beforehand -- the commit's own beliefs for the players it writes, and for every other player
what the worker's cache holds or what Redis holds now (the commit does not write them).

Why it stays exact: a rating ahead is used only when the commit before it landed, so it was
rated from exactly the state that commit left (``RatedAhead.gen``). Its own commit is then a
compare-and-set on that ``gen`` with the event ids checked by the script, as an optimistic
step's is: another writer in between, or an event of the step applied before, refuses it, and
the step is read and rated again as usual. Nothing of a rating ahead shows before it is used:
its dead letters are made, and counted, only then (``DeferredDead``).

Across batches (``MMR_RATE_AHEAD_BATCHES``, ``NextBatch``): a take of a replayed history is one
or two steps of its pool, so most steps are a batch's last, whose commit the next batch would wait
for. While a pool's last step of a batch commits, the next batch -- already taken: the batch
pipeline fixes it (``BatchPipeline.peek``) -- is planned, and its first step of that pool rated
from the state that commit leaves, by the same rules. The batch itself still starts only once the
batch before it has ended (its retries, halts and publication unchanged): it then uses the plan
made ahead, and the steps its pools' ops were cut into then, if its messages are the very same (a
partition halted meanwhile makes it plan again),
and a step rated ahead only if it is the very step it would rate first (the same ops) and the
commit before it landed. What planning ahead counts or dead-letters is counted once, when the
plan is used.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from typing import Any, Generic, TypeVar

from stream.service.messages import DeadLetter, Message
from stream.service.planning import DeadFn, Op, Plan, StepInputs, split_steps, step_inputs
from stream.state.cache import BeliefCache
from stream.state.redis_store import RedisStore

log = logging.getLogger(__name__)

R = TypeVar("R")

_ABSENT: Any = object()  # a player neither written nor cached (a cached None: known to have no belief)


class DeferredDead:
    """The ``DeadFn`` of a rating ahead: records each dead letter asked for and hands out a
    stand-in; the real ones (which count themselves in the metrics) are made only when the
    rating is used (``made``)."""

    def __init__(self) -> None:
        self.calls: dict[int, tuple[tuple[Any, ...], dict[str, Any]]] = {}  # id of the stand-in -> the call

    def __call__(self, *args: Any, **kwargs: Any) -> DeadLetter:
        stand_in = DeadLetter("not made: its rating ahead may be dropped")
        self.calls[id(stand_in)] = (args, kwargs)
        return stand_in

    def made(self, returned: list[DeadLetter], dead: DeadFn) -> list[DeadLetter]:
        """``returned`` (what the rating returned) with each stand-in made by ``dead``, in order."""
        out = []
        for d in returned:
            call = self.calls.get(id(d))
            out.append(d if call is None else dead(*call[0], **call[1]))
        return out


@dataclass(slots=True)
class RatedAhead(Generic[R]):
    """A step rated from the state the commit before it leaves, and what rated it."""

    engine: object
    result: R  # what the step's rate function returned (its dead letters not made: ``dead``)
    dead: DeferredDead
    #: the pool's ``gen`` once the commit before landed: the state this was rated from
    gen: str | None = field(default=None)
    #: how long the rating took, from its hand-over to the numba thread (``mmr_step_seconds``)
    seconds: float = 0.0


async def read_ahead(store: RedisStore, cache: BeliefCache, pool: str, step: StepInputs, gen: str,
                     written: Mapping[str, bytes]) -> dict[str, bytes | None] | None:
    """What ``step`` starts from if the commit writing ``written`` at ``gen`` lands (see the module
    docstring), in the step's order; None when it could not be read (the step is then rated as usual,
    and meets the same error there). Reads from Redis only the players neither written nor cached at
    ``gen``.

    Started before that commit is sent: Redis runs one command at a time, so a read sent after the
    commit's script waits until the script has run (~0.5 s for a step of 50,000 players), and the
    rating ahead with it. Read before, it is what the commit leaves: the commit does not write these
    players, and if another writer does, before the commit or between it and the next step's, one of
    the two compare-and-sets on ``gen`` refuses."""
    entry = cache.pool(pool)
    known: Mapping[str, bytes | None] = entry.values if entry.gen == gen else {}
    # by columns, before any await (the cache may move on meanwhile): ``base`` is made in the step's
    # order and only filled in after, so it stays in that order (a step is ~50,000 players)
    players = step.players
    base: dict[str, Any] = dict(zip(players, map(written.get, players, repeat(_ABSENT)), strict=True))
    rest = [p for p, v in base.items() if v is _ABSENT]
    if not rest:
        return base
    vals = list(map(known.get, rest, repeat(_ABSENT)))
    base.update(zip(rest, vals, strict=True))
    missing = [p for p, v in zip(rest, vals, strict=True) if v is _ABSENT]
    if missing:
        try:
            base.update(await store.beliefs(pool, missing))
        except Exception as exc:  # the step is rated again as usual, where this error is handled
            log.debug("pool %r: reading the next step ahead failed (%r); it is rated after the commit", pool, exc)
            return None
    return base


async def rate_ahead(executor: Executor, engine: object, rate: Callable[..., R], step: StepInputs,
                     reading: Awaitable[dict[str, bytes | None] | None], explain: bool, by_offsets: bool,
                     ) -> RatedAhead[R] | None:
    """``step`` rated on the numba thread from what ``reading`` (``read_ahead``) gives; None when it could
    not be (the step is then rated as usual, and meets the same error there)."""
    stored = await reading
    if stored is None:
        return None
    try:
        dead = DeferredDead()
        started = time.perf_counter()
        result = await asyncio.get_running_loop().run_in_executor(
            executor, partial(rate, places=step.places), engine, step.ops, stored, set(), {} if by_offsets else None,
            dead, explain)
    except Exception as exc:  # the step is rated again as usual, where this error is handled
        log.debug("rating the next step ahead failed (%r); it is rated after the commit", exc)
        return None
    return RatedAhead(engine, result, dead, seconds=time.perf_counter() - started)


async def drop(task: asyncio.Task[Any] | None) -> None:
    """Cancel a rating ahead whose commit before did not land, and wait until it has ended (a
    cancellation of the caller itself still propagates)."""
    if task is None:
        return
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.exception()  # retrieved: a failure of a rating that is not used is not an error


@dataclass(slots=True)
class Stashed:
    """A first step of the next batch rated ahead of the commit before it (``NextBatch``)."""

    step: StepInputs
    task: asyncio.Task[Any]  # ``rate_ahead``'s
    gen: str  # the pool's ``gen`` that commit left
    #: the pool's ops in the next batch as planned, and the steps they were cut into (``NextBatch.cut``)
    cut: tuple[list[Op], list[list[Op]]] | None = None


class NextBatch:
    """The batch after the one under way, planned ahead (``plan``), and per pool its first step
    rated ahead of the last commit of the batch under way (see the module docstring)."""

    def __init__(self, msgs: list[Message], plan: Plan, dead: DeferredDead, max_step_players: int,
                 by_offsets: bool) -> None:
        self.msgs = msgs  # as planned: the halted partitions' messages left out
        self.plan = plan  # its dead letters not made (``dead``), its messages not counted
        self.dead = dead
        self._max_step_players = max_step_players
        self._by_offsets = by_offsets
        self._first: dict[str, StepInputs | None] = {}
        self._cuts: dict[str, tuple[list[Op], list[list[Op]]]] = {}
        self.rated: dict[str, Stashed] = {}

    def first_step(self, pool: str) -> StepInputs | None:
        """The pool's first step in this batch; None if the pool has no ops in it or round results (their
        rounds are assembled when the batch runs, and may come before its ops)."""
        if pool not in self._first:
            ops = self.plan.ops.get(pool)
            first = None
            if ops and pool not in self.plan.results:
                steps = split_steps(ops, self._max_step_players)
                self._cuts[pool] = (ops, steps)
                first = step_inputs(steps[0], self._by_offsets)
            self._first[pool] = first
        return self._first[pool]

    def cut(self, pool: str) -> tuple[list[Op], list[list[Op]]] | None:
        """The pool's ops and the steps ``first_step`` cut them into (None if it did not): the batch,
        when it runs on this plan, steps through them without cutting them again."""
        return self._cuts.get(pool)

    def same(self, msgs: Sequence[Message]) -> bool:
        """``msgs`` are the very messages planned (the same objects, in order)."""
        return len(msgs) == len(self.msgs) and all(map(operator.is_, msgs, self.msgs))

    def take(self, pool: str) -> Stashed | None:
        return self.rated.pop(pool, None)

    def drop(self) -> int:
        """Cancel the ratings ahead not taken (a rating under way on the executor ends unused); how many."""
        rated, self.rated = self.rated, {}
        for s in rated.values():
            s.task.cancel()
        return len(rated)


async def result(task: asyncio.Task[Any]) -> Any:
    """What ``rate_ahead``'s task returned, None if it was cancelled (a cancellation of the caller
    itself still propagates)."""
    await asyncio.wait([task])
    return None if task.cancelled() else task.result()


def same_ops(a: StepInputs, b: StepInputs) -> bool:
    """The two steps are of the very same ops (objects of one plan), in order."""
    return len(a.ops) == len(b.ops) and all(map(operator.is_, a.ops, b.ops))
