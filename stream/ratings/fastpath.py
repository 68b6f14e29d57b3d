"""The batched and packed forms of a rating system that the pipeline engine uses for speed.

Why apart from ``base.RatingSystem``: a new system or the evaluation needs only its six per-belief
methods, while the engine (``stream.engine.pool``) also wants forms without per-player Python
objects. ``fast_path(system)`` gives the system's ``FastPath``; every form gives bit for bit what
the per-belief methods give (tests/unit/ratings/test_batch_codec.py). Optional forms are abstract
classes (``PackedRounds``, ``ArenaMatches``) asked by ``isinstance``: no method exists only to raise.
"""

from __future__ import annotations

import itertools
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar, NamedTuple

import numpy as np

from stream.ratings.base import Belief, FloatArray, IntArray, Rating, RatingSystem, flat_of, rows_of_columns
from stream.ratings.registry import SPECS
from stream.ratings.spec import load


class FastPath:
    """The engine's view of one system: the per-belief methods, batched where a subclass can."""

    #: beliefs this system returns are already fixed points of its codec (the one
    #: ``stream.ratings.codec.codec_for(name)`` gives): ``decode(encode(b)) == b`` bit for
    #: bit, so the engine need not round-trip them to match what the store gives back
    canonical_state: ClassVar[bool] = False
    #: the class of system this path is written for (``fast_path`` checks it)
    system_type: ClassVar[type] = RatingSystem

    def __init__(self, system: RatingSystem) -> None:
        self.system = system

    def summary_many(self, beliefs: Sequence[Belief]) -> list[Rating]:
        """``[system.summary(b) for b in beliefs]``, field for field, and its errors."""
        summary = self.system.summary
        return [summary(b) for b in beliefs]

    def latest_performances(self, packed: Sequence[bytes], skip: int = 0) -> list[float | None] | None:
        """Each belief's performance in the round that last changed it (what a game client shows
        beside a rating change), from its packed float64 bytes after ``skip`` bytes (a codec's tag).
        None: this system's beliefs keep no performance."""
        return None


def header_columns(packed: Sequence[bytes | memoryview], cols: Sequence[int],
                   tag: int | None = None) -> FloatArray | None:
    """``gather_columns`` of packed float64 beliefs (after the byte ``tag``, if given) from their
    first ``max(cols) + 1`` values, no array per belief. None when one is too short or lacks the tag."""
    skip = 0 if tag is None else 1
    width = 8 * (max(cols) + 1)
    end = skip + width
    if not packed or min(map(len, packed)) < end:
        return None
    rows = np.frombuffer(b"".join([v[:end] for v in packed]), dtype=np.uint8).reshape(len(packed), end)
    if tag is not None and not bool((rows[:, 0] == tag).all()):
        return None
    head = np.ascontiguousarray(rows[:, skip:]).view("<f8")
    out: FloatArray = head[:, list(cols)].T.astype(np.float64)
    return out


class ColumnSummaries(FastPath, ABC):
    """``summary_many`` of a system whose summary reads fixed positions of the belief."""

    #: the belief positions ``ratings`` reads, in order
    columns: ClassVar[tuple[int, ...]]

    @abstractmethod
    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        """The summaries from ``cols[j]`` = position ``columns[j]`` of every belief, with the float64
        operations of ``summary`` (None: the per-belief path must decide)."""

    def summary_many(self, beliefs: Sequence[Belief]) -> list[Rating]:
        cols = gather_columns(beliefs, self.columns)
        out = None if cols is None else self.ratings(cols)
        return out if out is not None else super().summary_many(beliefs)

    def summary_packed(self, packed: Sequence[bytes], tag: int | None = None) -> list[Rating] | None:
        """``summary_many`` of packed beliefs from their header alone (``header_columns``)."""
        cols = header_columns(packed, self.columns, tag)
        return None if cols is None else self.ratings(cols)


class RoundChange(NamedTuple):
    """``PackedRounds.change_gathered``: per player of the round, in its order, the summaries
    before and after it (``Rating``'s fields as columns) and the performance in it (None: the
    system keeps none)."""

    rating_before: FloatArray
    mu_before: FloatArray
    sigma_before: FloatArray
    rating: FloatArray
    mu: FloatArray
    sigma: FloatArray
    rounds: IntArray  # after the round (0: only registered, see ``PoolEngine._changed``)
    performance: FloatArray | None


class PackedRounds(ABC):
    """Rounds rated on *packed* beliefs (little-endian float64 values gathered into one array,
    ``stream.state.packed_pool``), bit for bit ``rate_round``'s: no array per player."""

    @abstractmethod
    def new_packed_belief(self) -> bytes:
        """``new_belief()`` packed."""

    @abstractmethod
    def rate_round_gathered(self, flat: FloatArray, offsets: IntArray, ranks: IntArray | Sequence[int],
                            time_ms: int, weight: float = 1.0,
                            perf_ceiling: float = math.inf) -> tuple[FloatArray, IntArray] | None:
        """``rate_round`` on beliefs gathered into ``flat`` (player i's at ``offsets[i] : offsets[i + 1]``):
        the new beliefs' values back to back and their offsets, or None when the round changes nothing."""

    def change_gathered(self, flat: FloatArray, offsets: IntArray, values: FloatArray, out_offsets: IntArray
                        ) -> RoundChange | None:
        """The change of a round ``rate_round_gathered`` rated from ``flat`` into ``values``, by columns,
        with the float64 operations of ``summary_many`` and ``latest_performances``. None: the
        per-player path decides."""
        return None


class ArenaMatches(ABC):
    """Matches rated in place on beliefs a whole pool keeps in one arena, by slot: no belief array
    per player and batch. Bit for bit ``rate_matches`` on the arena's beliefs."""

    @abstractmethod
    def new_arena(self) -> Arena:
        """An empty arena for this system's beliefs."""

    @abstractmethod
    def rate_arena(self, arena: Arena, slots: IntArray, a: IntArray, b: IntArray, scores: FloatArray,
                   advantages: FloatArray | None = None) -> None:
        """``rate_matches`` on the beliefs at ``slots`` (local player i at ``slots[i]``), in place."""

    @abstractmethod
    def summary_arena(self, arena: Arena, slots: IntArray) -> list[Rating]:
        """``summary_many(arena.beliefs(slots))`` and its errors, with no belief array per slot."""


class Arena(ABC):
    """Beliefs by slot (``ArenaMatches``)."""

    @abstractmethod
    def add(self, beliefs: Sequence[Belief]) -> IntArray:
        """Append beliefs; their slots."""

    @abstractmethod
    def add_copies(self, belief: Belief, n: int) -> IntArray:
        """``add([belief] * n)`` (new players at the prior); their slots."""

    @abstractmethod
    def set(self, slot: int, belief: Belief) -> None:
        """Replace the belief at ``slot``."""

    @abstractmethod
    def beliefs(self, slots: IntArray) -> list[Belief]:
        """The beliefs at ``slots`` as arrays (new ones)."""


def fast_path(system: RatingSystem) -> FastPath:
    """The fast path ``system``'s spec names, or the generic one (an unlisted name, or another class
    under a known name)."""
    spec = SPECS.get(system.name)
    if spec is None or spec.fast_path is None:
        return FastPath(system)
    path_type: type[FastPath] = load(spec.fast_path)
    return path_type(system) if isinstance(system, path_type.system_type) else FastPath(system)


def gather_columns(beliefs: Sequence[Belief], cols: Sequence[int]) -> FloatArray | None:
    """``out[j, i] = beliefs[i][cols[j]]`` in one pass; None when the per-item path must run
    (not all 1-D float64, or too short: it raises)."""
    gathered = flat_of(beliefs, casting="no")  # every belief already float64: no value changes type
    return None if gathered is None else columns_at(*gathered, cols)


def columns_at(flat: FloatArray, offsets: IntArray, cols: Sequence[int]) -> FloatArray | None:
    """``out[j, i] = flat[offsets[i] + cols[j]]``; None when there is no belief or one is too short."""
    if len(offsets) < 2 or int(np.diff(offsets).min()) <= max(cols):
        return None
    out: FloatArray = flat[offsets[:-1][None, :] + np.asarray(cols, dtype=np.int64)[:, None]]
    return out


def ratings_from_columns(
    rating: FloatArray, mu: FloatArray, sigma: FloatArray | float, rounds: FloatArray
) -> list[Rating] | None:
    """``Rating(float(rating[i]), float(mu[i]), float(sigma[i]), int(rounds[i]))`` for every i
    (``sigma`` may be one number); None if a ``rounds`` is not finite and well inside int64."""
    if not bool((np.abs(rounds) < 2.0**62).all()):  # also False for NaN
        return None
    sig = itertools.repeat(float(sigma)) if isinstance(sigma, float) else sigma.tolist()
    # astype(int64) truncates toward zero like int() on these values
    return list(rows_of_columns(Rating, rating.tolist(), mu.tolist(), sig, rounds.astype(np.int64).tolist()))


__all__ = ["Arena", "ArenaMatches", "ColumnSummaries", "FastPath", "PackedRounds", "RoundChange", "fast_path"]
