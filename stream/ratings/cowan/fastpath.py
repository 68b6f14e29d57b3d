"""The engine's fast path of Cowan: beliefs that are codec fixed points, batched summaries,
matches rated in place in a pool-wide arena."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np

from stream.ratings.base import Belief, FloatArray, IntArray, Rating, flat_of
from stream.ratings.cowan.arena import CowanArena, arena_from_flat, moments_slots
from stream.ratings.cowan.system import ELO_SCALE, Cowan
from stream.ratings.fastpath import Arena, ArenaMatches, FastPath


class CowanFastPath(FastPath, ArenaMatches):
    #: the kernels quantise every belief after every match (``quant``): a store round trip changes nothing
    canonical_state: ClassVar[bool] = True
    system_type = Cowan
    system: Cowan

    def summary_many(self, beliefs: Sequence[Belief]) -> list[Rating]:
        """The whole batch in two njit calls (the same ``moments`` per belief as ``summary``;
        a malformed belief lets ``summary`` raise)."""
        n = len(beliefs)
        if n < 2:
            return super().summary_many(beliefs)
        gathered = flat_of(beliefs)
        out = None if gathered is None else self._ratings(*gathered)
        return super().summary_many(beliefs) if out is None else out

    def summary_arena(self, arena: Arena, slots: IntArray) -> list[Rating]:
        """``summary_many`` of the slots' beliefs, their moments read in place (``CowanArena.moments``)."""
        if not isinstance(arena, CowanArena):
            raise TypeError("a Cowan arena is needed")
        means, sds, rounds, bad = arena.moments(slots, self.system.model.grid)
        if bad >= 0:  # a malformed belief: ``summary`` names the fault
            return super().summary_many(arena.beliefs(slots))
        return self._of_moments(means, sds, rounds)

    def _ratings(self, flat: FloatArray, offsets: IntArray) -> list[Rating] | None:
        """The Ratings of the beliefs ``flat[offsets[i]:offsets[i + 1]]`` (one njit call), None
        if one of them is malformed."""
        grid = self.system.model.grid
        start, _, lohi, counts, bad = arena_from_flat(flat, offsets, grid.shape[0])
        if bad >= 0:
            return None
        means, sds, rounds, bad = moments_slots(flat, start, lohi, counts, np.arange(len(offsets) - 1), grid)
        if bad >= 0:
            return None
        return self._of_moments(means, sds, rounds)

    @staticmethod
    def _of_moments(means: FloatArray, sds: FloatArray, rounds: IntArray) -> list[Rating]:
        return [
            Rating(rating=r, mu=m, sigma=s, rounds=k)
            for r, m, s, k in zip(
                (ELO_SCALE * means + 1500.0).tolist(), means.tolist(), (ELO_SCALE * sds).tolist(), rounds.tolist(),
                strict=True,
            )
        ]

    def new_arena(self) -> CowanArena:
        return self.system.new_arena()

    def rate_arena(self, arena: Arena, slots: IntArray, a: IntArray, b: IntArray, scores: FloatArray,
                   advantages: FloatArray | None = None) -> None:
        if not isinstance(arena, CowanArena):
            raise TypeError("a Cowan arena is needed")
        self.system.rate_arena(arena, slots, a, b, scores, advantages)
