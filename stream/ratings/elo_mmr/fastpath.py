"""The engine's fast path of Elo-MMR / Elo-MMχ: rounds on packed beliefs (no numpy object per
player; ``EloMMR``'s own kernels, so ``rate_round``'s bits), summaries from columns.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence

import numpy as np

from stream.ratings.base import FloatArray, IntArray, Rating, RatingError
from stream.ratings.codec import Float64Codec
from stream.ratings.elo_mmr.system import DISPLAY_SIG, HEADER, EloMMR, invalid_length
from stream.ratings.fastpath import ColumnSummaries, PackedRounds, RoundChange, columns_at, ratings_from_columns


class EloMMRFastPath(ColumnSummaries, PackedRounds):
    """Belief header ``[μ, σ, ., ., rounds, .]``: the summary is ``(μ − 3(σ − 80), μ, σ, rounds)``."""

    system_type = EloMMR
    system: EloMMR
    columns = (0, 1, 4)

    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(cols[0] - 3.0 * (cols[1] - DISPLAY_SIG), cols[0], cols[1], cols[2])

    def new_packed_belief(self) -> bytes:
        return Float64Codec.pack(self.system.new_belief())

    def rate_round_gathered(self, flat: FloatArray, offsets: IntArray, ranks: IntArray | Sequence[int],
                            time_ms: int, weight: float = 1.0,
                            perf_ceiling: float = math.inf) -> tuple[FloatArray, IntArray] | None:
        system = self.system
        rk = system._check_round(len(offsets) - 1, ranks, time_ms, weight, perf_ceiling)
        if rk is None:
            return None
        lengths = np.diff(offsets)
        bad = invalid_length(lengths)
        if bad >= 0:
            raise RatingError(f"packed belief of player #{bad} has an invalid size {8 * int(lengths[bad])} bytes")
        out, out_offsets, _ = system._rate_flat(flat, offsets, rk, time_ms, weight, perf_ceiling)
        return out, out_offsets

    def change_gathered(self, flat: FloatArray, offsets: IntArray, values: FloatArray, out_offsets: IntArray
                        ) -> RoundChange | None:
        """``PackedRounds.change_gathered``, the summaries before read from ``flat`` itself."""
        cols = columns_at(flat, offsets, self.columns)
        return None if cols is None else self._change(cols, values, out_offsets)

    def _change(self, cols: FloatArray, values: FloatArray, offsets: IntArray) -> RoundChange | None:
        starts, ends = offsets[:-1], offsets[1:]
        if int((ends - starts).min()) < HEADER:
            return None
        mu, sig, rounds = values[starts], values[starts + 1], values[starts + 4]
        if not (bool((np.abs(cols[2]) < 2.0**62).all()) and bool((np.abs(rounds) < 2.0**62).all())):
            return None  # as ``ratings_from_columns``
        perf = None
        if not self.system.gaussian:
            if int((ends - starts).min()) <= HEADER:  # a belief without a logistic term
                return None
            perf = values[ends - 3]
        return RoundChange(cols[0] - 3.0 * (cols[1] - DISPLAY_SIG), cols[0], cols[1], mu - 3.0 * (sig - DISPLAY_SIG),
                           mu, sig, rounds.astype(np.int64), perf)

    def latest_performances(self, packed: Sequence[bytes], skip: int = 0) -> list[float | None] | None:
        """The centre of each belief's newest logistic term (the last three floats): the performance of
        the round that appended it, as ``rate_round_detailed`` returns it. None for Elo-MMχ (no
        logistic terms) and for a belief without terms."""
        if self.system.gaussian:
            return None
        unpack = _F64.unpack_from
        short = skip + 8 * HEADER
        return [unpack(v, len(v) - 24)[0] if len(v) > short else None for v in packed]


_F64 = struct.Struct("<d")
