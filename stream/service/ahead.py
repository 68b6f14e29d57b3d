"""A pool's next steps rated while the steps before them commit: a chain of ratings ahead.

Why: a large batch of one pool -- a replayed history, hundreds of rounds of thousands of
players -- is cut into steps of at most ``MMR_MAX_STEP_PLAYERS`` players, each read, rated and
committed in turn (stream.service.step). Redis spends a good part of a second applying the
commit of a step of ~50,000 beliefs, on its own core, and the next step's rating (on the numba
thread) need not wait for it: the beliefs that step starts from, if the commit lands, are known
beforehand -- the commit's own beliefs for the players it writes, and for every other player
what the worker's cache holds or what Redis holds now (the commit does not write them).

Nor need the step after it wait for that commit, nor for the next step's (``Chain``): once a step
is rated ahead, its beliefs are what its commit will write, so the step after it is rated at once
from those, the commits before them still in flight, and the cache or Redis for every player none
of them writes -- at most ``MMR_RATE_AHEAD_DEPTH`` steps rated and not yet committed. With one
step ahead at a time, the numba thread waited for each commit to land and for the event loop's
work around it before its next step: ~3 s of a ~18 s replay of the Codeforces history through the
worker (BENCHMARKS.md, "Service"). A step's players that no commit before it writes are read while
the step before it is rated (``Chain._prefetch``): a read sent after a commit's script waits until
the script has run.

Why it stays exact: a rating ahead is used only when every commit before it landed, so it was
rated from exactly the state those commits left (``RatedAhead.gen``, the ``gen`` the last one left).
Its own commit is then a compare-and-set on that ``gen`` with the event ids checked by the script,
as an optimistic step's is: another writer in between, or an event of the step applied before,
refuses it, and the step is read and rated again as usual (and the chain dropped: every step
after it was rated from it). Nothing of a rating ahead shows before it is used: its dead letters
are made, and counted, only then (``DeferredDead``).

Across batches (``MMR_RATE_AHEAD_BATCHES``, ``NextBatch``): a take of a replayed history is one
or two steps of its pool, so most steps are a batch's last, whose commit the next batch would wait
for. Once a chain has rated a pool's last step of a batch, the next batch -- already taken: the
batch pipeline fixes it (``BatchPipeline.peek``) -- is planned, and the chain goes on into its
steps of that pool, by the same rules; what it holds of them when the batch ends is kept for that
batch. The batch itself still starts only once the batch before it has ended (its retries, halts
and publication unchanged): it then uses the plan made ahead, and the steps its pools' ops were
cut into then, if its messages are the very same (a partition halted meanwhile makes it plan
again), and the chain only if the pool's ops are the very ops it was cut from. What planning ahead
counts or dead-letters is counted once, when the plan is used.
"""

from __future__ import annotations

import asyncio
import logging
import operator
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from functools import partial
from itertools import filterfalse, repeat
from typing import Any, Generic, TypeVar, cast

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
                     written: Sequence[Mapping[str, bytes]], fetched: Mapping[str, bytes | None] | None = None,
                     ) -> dict[str, bytes | None] | None:
    """What ``step`` starts from once the commits writing ``written`` (newest first) land on the state at
    ``gen`` (see the module docstring), in the step's order; None when it could not be read (the step is
    then rated as usual, and meets the same error there). Each player's value is the newest written,
    else the cache's at ``gen``, else ``fetched`` (``Chain._prefetch``), else read from Redis now.

    A read sent while a commit's script runs waits until the script has run (~0.5 s for a step of 50,000
    players), and the rating ahead with it: so the chain's first step is read before its commit is sent,
    and each later one while the step before it is rated (``fetched``). A player read before such a commit
    is what the commit leaves: the commit does not write it, and if another writer does, before the
    commit or between it and the next step's, one of the compare-and-sets on ``gen`` refuses."""
    entry = cache.pool(pool)
    known: Mapping[str, bytes | None] = entry.values if entry.gen == gen else {}
    # by columns, before any await (the cache may move on meanwhile): ``base`` is made in the step's
    # order and only filled in after, so it stays in that order (a step is ~50,000 players)
    players = step.players
    newest = written[0] if written else {}
    base: dict[str, Any] = dict(zip(players, map(newest.get, players, repeat(_ABSENT)), strict=True))
    rest = [p for p, v in base.items() if v is _ABSENT]
    for source in (*written[1:], known, fetched or {}):
        if not rest:
            return base
        vals = list(map(source.get, rest, repeat(_ABSENT)))
        base.update(zip(rest, vals, strict=True))
        rest = [p for p, v in zip(rest, vals, strict=True) if v is _ABSENT]
    if rest:
        try:
            base.update(await store.beliefs(pool, rest))
        except Exception as exc:  # the step is rated again as usual, where this error is handled
            log.debug("pool %r: reading the next step ahead failed (%r); it is rated after the commit", pool, exc)
            return None
    return base


@dataclass(slots=True)
class StepEnd(Generic[R]):
    """A step rated up to its new beliefs (``beliefs``: what its commit writes), the rest of its end --
    its outputs, explanations and the commit's rows -- made by ``finish``. A chain rates the next step
    from those beliefs on the numba thread while ``finish`` runs on a thread of its own: the end is
    ~13 % of a step's rating of the Codeforces history and needs nothing the next step changes."""

    beliefs: Mapping[str, bytes]
    finish: Callable[[], R]


async def rate_ahead(executor: Executor, engine: object, rate: Callable[..., R | StepEnd[R]], step: StepInputs,
                     stored: dict[str, bytes | None], explain: bool, by_offsets: bool, ends: Executor | None = None,
                     on_beliefs: Callable[[Mapping[str, bytes]], None] | None = None) -> RatedAhead[R] | None:
    """``step`` rated on the numba thread from ``stored`` (``read_ahead``); None when it could not be (the
    step is then rated as usual, and meets the same error there). A rating that comes back as a
    ``StepEnd`` hands its beliefs to ``on_beliefs`` and is finished on ``ends``."""
    loop = asyncio.get_running_loop()
    try:
        dead = DeferredDead()
        started = time.perf_counter()
        rated = await loop.run_in_executor(
            executor, partial(rate, places=step.places), engine, step.ops, stored, set(), {} if by_offsets else None,
            dead, explain)
        if isinstance(rated, StepEnd):
            if on_beliefs is not None:
                on_beliefs(rated.beliefs)
            rated = await loop.run_in_executor(ends or executor, rated.finish)
        result = cast(R, rated)
    except Exception as exc:  # the step is rated again as usual, where this error is handled
        log.debug("rating the next step ahead failed (%r); it is rated after the commit", exc)
        return None
    return RatedAhead(engine, result, dead, seconds=time.perf_counter() - started)


async def result(task: asyncio.Task[Any]) -> Any:
    """What a rating ahead's task returned, None if it was cancelled (a cancellation of the caller
    itself still propagates)."""
    await asyncio.wait([task])
    return None if task.cancelled() else task.result()


@dataclass(slots=True)
class Link:
    """A step of a ``Chain``, rated ahead (``task``: ``RatedAhead`` or None)."""

    step: StepInputs
    task: asyncio.Task[Any]


#: what a chain rates each step with: (the step, what it starts from, where its beliefs go as soon as they
#: are made) -> the step rated, or None
Rater = Callable[[StepInputs, dict[str, "bytes | None"], Callable[[Mapping[str, bytes]], None]],
                 Awaitable["RatedAhead[Any] | None"]]


class Chain:
    """A pool's next steps rated one after another, each as soon as the one before it is rated, from the
    state the commits before it leave (see the module docstring).

    It starts at a step whose commit is about to be sent (``start``) and rates the steps after it
    (``todo``; then, with ``more``, the pool's steps of the next batch), at most ``depth`` of them rated
    and not yet taken. Its state: the beliefs of the commits sent and not landed and of the steps rated
    ahead (``pending``, oldest first: a step starts from the newest value of each player there), and
    the ``gen`` the commits landed so far left, at which the cache's values hold for every other
    player. A step is taken (``take``) once the commit before it landed (``landed``), with that ``gen``."""

    def __init__(self, store: RedisStore, cache: BeliefCache, pool: str, kind: str, rate: Rater, gen: str,
                 committing: StepInputs, written: Mapping[str, bytes], todo: Sequence[StepInputs],
                 more: Callable[[], NextBatch | None] | None, depth: int) -> None:
        self.store, self.cache, self.pool, self.kind, self.rate = store, cache, pool, kind, rate
        self.gen = gen
        self.pending: deque[Mapping[str, bytes]] = deque([written])
        #: the steps of ``pending`` and of the links being rated: no player of theirs is read ahead of time
        self.open: deque[StepInputs] = deque([committing])
        self.links: deque[Link] = deque()
        self.todo: deque[StepInputs] = deque(todo)
        self.more = more
        #: the next batch the chain went on into (``more``), its pool's ops and steps as cut there
        self.stash: NextBatch | None = None
        self.cut: tuple[list[Op], list[StepInputs]] | None = None
        self.depth = max(1, depth)
        self._fetching: dict[int, asyncio.Task[Any]] = {}  # id of a step -> its players read ahead of time
        self._stopped = False  # a rating ahead failed, or the chain was dropped: nothing more is rated ahead
        self._rating = False  # a link is being read or rated (the next waits for its beliefs)
        self._lost = 0  # steps taken whose rating ahead failed (counted as dropped by ``drop``)

    def start(self) -> None:
        """Rate the first step ahead: its read goes to Redis now, before the commit (the caller yields once)."""
        self._extend()

    def resume(self, more: Callable[[], NextBatch | None] | None) -> None:
        """Go on in the batch the chain went on into (its steps now this batch's): ``more`` is that batch's next."""
        self.more, self.stash, self.cut = more, None, None
        self._extend()

    async def take(self, step: StepInputs) -> RatedAhead[Any] | None:
        """``step`` rated ahead, from the state the commit before it left (at ``gen``), if it is the chain's
        next; None if it is not, or could not be rated (the caller then drops the chain)."""
        if not self.links or self.links[0].step is not step:
            return None
        rated: RatedAhead[Any] | None = await result(self.links.popleft().task)
        if rated is None:
            self._lost += 1
            return None
        rated.gen = self.gen
        self._extend()
        return rated

    def landed(self, gen: int | str) -> None:
        """The oldest commit sent landed, leaving ``gen``; the chain goes on if it waited for the next batch."""
        self.gen = str(gen)
        self.pending.popleft()
        self.open.popleft()
        self._extend()

    def holds_more(self) -> bool:
        """Steps rated ahead or still to rate (at the end of a batch: the next batch's)."""
        return bool(self.links or self.todo)

    def drop(self) -> int:
        """Cancel every rating ahead (one under way on the executor ends unused); how many, with those taken
        that could not be rated."""
        n = len(self.links) + self._lost
        self._lost = 0
        for link in self.links:
            link.task.cancel()
        for t in self._fetching.values():
            t.cancel()
        self.links.clear()
        self.todo.clear()
        self._fetching.clear()
        self._stopped = True
        return n

    def _next_step(self) -> StepInputs | None:
        """The next step to rate ahead, going on into the next batch once this one's are all rated."""
        if not self.todo and self.more is not None:
            nb = self.more()  # (None: not taken yet; asked again as the chain's commits land)
            if nb is not None:
                self.more = None
                steps, cut = nb.steps(self.pool), nb.cut(self.pool)
                if steps and cut is not None:
                    self.stash, self.cut = nb, (cut[0], steps)
                    self.todo.extend(steps)
        return self.todo[0] if self.todo and self.todo[0].kind == self.kind else None

    def _extend(self) -> None:
        """Rate the next step ahead if the last one is rated and fewer than ``depth`` wait to be taken."""
        if self._stopped or self._rating or len(self.links) >= self.depth:
            return
        step = self._next_step()
        if step is None:
            return
        self.todo.popleft()
        self.open.append(step)
        self._rating = True
        fetching = self._fetching.pop(id(step), None) or self._prefetch(step)
        self.links.append(Link(step, asyncio.ensure_future(self._rate(step, fetching))))
        after = self._next_step()  # read while this one is rated
        if after is not None and id(after) not in self._fetching:
            fetch = self._prefetch(after)
            if fetch is not None:
                self._fetching[id(after)] = fetch

    def _prefetch(self, step: StepInputs) -> asyncio.Task[Any] | None:
        """The players of ``step`` neither in an open step nor cached at ``gen``, read now: no commit in flight
        or rated ahead before ``step`` can write them (another writer makes a compare-and-set refuse)."""
        entry = self.cache.pool(self.pool)
        known = entry.values if entry.gen == self.gen else {}
        # each filter by membership, in C, over the step's players only: ``set.difference`` with a dict
        # walks the whole dict, and the cache holds the whole pool (280,000 players of the Codeforces history)
        left: Iterable[str] = filterfalse(known.__contains__, step.players)
        for s in self.open:
            if s is not step:
                left = filterfalse(s.players.__contains__, left)
        want = list(left)
        if not want:
            return None

        async def read() -> Mapping[str, bytes | None] | None:
            try:
                return await self.store.beliefs(self.pool, want)
            except Exception:  # read again by ``read_ahead``, which handles its error
                return None

        return asyncio.ensure_future(read())

    async def _rate(self, step: StepInputs, fetching: asyncio.Task[Any] | None) -> RatedAhead[Any] | None:
        handed = False

        def beliefs(written: Mapping[str, bytes]) -> None:  # the next step is rated from these at once
            nonlocal handed
            handed, self._rating = True, False
            self.pending.append(written)
            self._extend()

        try:
            fetched = await fetching if fetching is not None else None
            newest_first = list(reversed(self.pending))
            stored = await read_ahead(self.store, self.cache, self.pool, step, self.gen, newest_first, fetched)
            rated = None if stored is None else await self.rate(step, stored, beliefs)
        finally:
            if not handed:
                self._rating = False
        if rated is None:  # (a step rated after it from its beliefs is dropped with it: ``take``)
            self._stopped = True
            return None
        if not handed:
            beliefs(rated.result[0].beliefs)
        return rated


class NextBatch:
    """The batch after the one under way, planned ahead (``plan``), and per pool its steps rated ahead
    of the last commits of the batch under way (a ``Chain``; see the module docstring)."""

    def __init__(self, msgs: list[Message], plan: Plan, dead: DeferredDead, max_step_players: int,
                 by_offsets: bool) -> None:
        self.msgs = msgs  # as planned: the halted partitions' messages left out
        self.plan = plan  # its dead letters not made (``dead``), its messages not counted
        self.dead = dead
        self._max_step_players = max_step_players
        self._by_offsets = by_offsets
        self._steps: dict[str, list[StepInputs] | None] = {}
        self._cuts: dict[str, tuple[list[Op], list[list[Op]]]] = {}
        self.rated: dict[str, Chain] = {}

    def steps(self, pool: str) -> list[StepInputs] | None:
        """The pool's steps in this batch; None if the pool has no ops in it or round results (their
        rounds are assembled when the batch runs, and may come before its ops)."""
        if pool not in self._steps:
            ops = self.plan.ops.get(pool)
            steps = None
            if ops and pool not in self.plan.results:
                cut = split_steps(ops, self._max_step_players)
                self._cuts[pool] = (ops, cut)
                steps = [step_inputs(s, self._by_offsets) for s in cut]
            self._steps[pool] = steps
        return self._steps[pool]

    def cut(self, pool: str) -> tuple[list[Op], list[list[Op]]] | None:
        """The pool's ops and the steps ``steps`` cut them into (None if it did not): the batch, when it
        runs on this plan, steps through them without cutting them again."""
        return self._cuts.get(pool)

    def same(self, msgs: Sequence[Message]) -> bool:
        """``msgs`` are the very messages planned (the same objects, in order)."""
        return len(msgs) == len(self.msgs) and all(map(operator.is_, msgs, self.msgs))

    def keep(self, pool: str, chain: Chain) -> int:
        """Hold ``chain`` for the pool's steps in this batch; how many ratings ahead an older one held were
        dropped (one of an earlier try at the batch before)."""
        old = self.rated.pop(pool, None)
        self.rated[pool] = chain
        return old.drop() if old is not None and old is not chain else 0

    def take(self, pool: str) -> Chain | None:
        return self.rated.pop(pool, None)

    def drop(self) -> int:
        """Cancel the ratings ahead not taken (a rating under way on the executor ends unused); how many."""
        rated, self.rated = self.rated, {}
        return sum(c.drop() for c in rated.values())
