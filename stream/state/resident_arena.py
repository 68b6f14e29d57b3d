"""A pool's beliefs kept by the worker in one arena from step to step (``ResidentArena``).

Why: a worker that owns a pool is usually its only writer, so what a step starts from is what
its own steps left. The worker's cache of encoded values (``stream.state.cache``) knows that,
but as one ``bytes`` per player: each step of rounds copied every one of its players' values
out of it into a fresh arena (``TaggedPool``), and every value the step wrote back into it as
a new ``bytes``, a dict entry per player and step (~50,000 players a step of the Codeforces
history, each in ~4.5 rounds). Here a pool's arena lives on: a step gathers its rounds from it
by index and writes them back in place, as the embedded replay does, and only players the
arena has never held are read from Redis.

Why it stays exact: the arena is what Redis holds at ``gen`` for every player it holds, plus
the ratings made in it whose commits have not landed yet, in order. As for the cache, every
write of a pool's beliefs is a compare-and-set on ``gen``, so another writer is found by the
next read or the next commit, and the arena is then replaced by an empty one. The ratings made
in it are counted (``rated``) and so are those whose commits landed (``landed``):

* a step rated from what Redis holds (not ahead) starts only from a settled arena (every rating
  made in it landed); one that is not -- a rating ahead not used, a commit refused or lost --
  is replaced by an empty one and the step reads its players from Redis;
* each rating names how many ratings it expects before it (its ``ArenaLease``) and checks that
  on the numba thread when it begins (``begin``): a rating that ran in between (one cancelled
  while already on the executor) makes it fail with ``StaleArena``, and the step starts again
  from Redis with an empty arena;
* a commit lands in the arena (``land``) only as the next one in order at the ``gen`` the arena
  is at; anything else replaces the arena.

A player the arena does not hold is read from Redis at the ``gen`` of the read, and placed there
by the rating that uses it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import filterfalse

from stream.state.packed_pool import PackedPool
from stream.state.tagged_pool import STEP_SLACK

#: rough memory of a player's name, its dict entry and its list slot (CPython, 64-bit), beyond the arena
_NAME_OVERHEAD = 120


class StaleArena(RuntimeError):
    """A rating found its arena changed by a rating it did not expect: it is rated again from Redis."""


@dataclass(slots=True)
class ArenaLease:
    """A rating's claim on an arena: the ratings it expects made there before it (``expect``), and
    its own number once it has begun (``mine``)."""

    arena: ResidentArena
    expect: int
    mine: int = -1


class ResidentArena:
    """One pool's beliefs as a step of rounds rates them (``TaggedPool`` over ``pool``), kept from
    step to step; ``tag``: the codec's tag byte every stored value starts with (module docstring)."""

    def __init__(self, tag: bytes) -> None:
        self.tag = tag
        # room in each slot: a player's belief grows by a few values a round and is then written in place
        self.pool = PackedPool(slack=STEP_SLACK)
        self.gen: str | None = None  # the pool's gen its landed ratings are at (None: none yet, nothing held)
        self.rated = 0
        self.landed = 0

    @property
    def settled(self) -> bool:
        """Every rating made here has landed: the arena is what Redis holds at ``gen``."""
        return self.rated == self.landed

    def missing(self, players: Iterable[str]) -> list[str]:
        """The players whose stored belief must be read from Redis (not held here)."""
        return list(filterfalse(self.pool.index.__contains__, players))

    def lease(self) -> ArenaLease:
        """A claim for a rating from what the arena holds now (settled)."""
        return ArenaLease(self, self.rated)

    def lease_after(self, before: ArenaLease) -> ArenaLease:
        """A claim for a rating made right after ``before``'s (rated ahead of its commit)."""
        return ArenaLease(self, before.mine if before.mine >= 0 else before.expect + 1)

    def begin(self, lease: ArenaLease) -> None:
        """On the numba thread, before the rating touches the arena (module docstring)."""
        if lease.arena is not self or self.rated != lease.expect:
            raise StaleArena(f"expected {lease.expect} ratings made in the arena, found {self.rated}")
        self.rated += 1
        lease.mine = self.rated

    def read_at(self, gen: str) -> None:
        """Values were read from Redis at ``gen`` to be placed here (the arena's own gen, or its first)."""
        if self.gen is None:
            self.gen = gen
        elif self.gen != gen:
            raise ValueError(f"values read at gen {gen} for an arena at gen {self.gen}")

    def land(self, lease: ArenaLease, old_gen: str, new_gen: str) -> bool:
        """``lease``'s rating was committed from ``old_gen`` to ``new_gen`` (the same when it wrote
        nothing); False when that is not the next landing this arena expects (it must be replaced)."""
        if lease.arena is not self or lease.mine != self.landed + 1 or self.gen != old_gen:
            return False
        self.landed = lease.mine
        self.gen = new_gen
        return True

    def nbytes(self) -> int:
        """Approximate memory: the arena, its per-player arrays and the players' names."""
        return self.pool.nbytes() + sum(map(len, self.pool.names)) + _NAME_OVERHEAD * len(self.pool.names)
