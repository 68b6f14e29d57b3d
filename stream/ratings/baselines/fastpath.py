"""The engine's fast paths of the baseline systems: summaries read from fixed columns, and
Elo's matches on one (players × 2) matrix. Each gives exactly the float64 operations of the
system's own ``summary`` / ``rate_matches``, on columns."""

from __future__ import annotations

import numpy as np

from stream.ratings.base import FloatArray, IntArray, Rating
from stream.ratings.baselines.codeforces import Codeforces
from stream.ratings.baselines.elo import Elo
from stream.ratings.baselines.glicko import Glicko
from stream.ratings.baselines.kernels import elo_match_steps
from stream.ratings.baselines.topcoder import TopCoder
from stream.ratings.baselines.trueskill import TrueSkill
from stream.ratings.fastpath import ColumnSummaries, MatrixMatches, ratings_from_columns


class EloFastPath(ColumnSummaries, MatrixMatches):
    """Belief ``[rating, rounds]``: the summary is ``(r, r, 0, rounds)``."""

    system_type = Elo
    system: Elo
    columns = (0, 1)
    belief_width = 2

    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(cols[0], cols[0], 0.0, cols[1])

    def rate_matches_columns(self, state: FloatArray, a: IntArray, b: IntArray, scores: FloatArray,
                             times_ms: IntArray) -> None:
        """``Elo.rate_matches``'s kernel on the same columns, so the same bits."""
        p = self.system.params
        r = np.ascontiguousarray(state[:, 0])
        cnt = np.ascontiguousarray(state[:, 1])
        elo_match_steps(r, cnt, np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64),
                        np.asarray(scores, dtype=np.float64), float(p.k), float(p.scale), np.zeros(len(a)))
        state[:, 0] = r
        state[:, 1] = cnt

    def summary_columns(self, state: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(state[:, 0], state[:, 0], 0.0, state[:, 1])


class CodeforcesFastPath(ColumnSummaries):
    system_type = Codeforces
    columns = (0, 1)

    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(cols[0], cols[0], 0.0, cols[1])


class GlickoFastPath(ColumnSummaries):
    """Displayed rating ``r − 2RD``."""

    system_type = Glicko
    columns = (0, 1, 2)

    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(cols[0] - 2.0 * cols[1], cols[0], cols[1], cols[2])


class TopCoderFastPath(ColumnSummaries):
    system_type = TopCoder
    columns = (0, 1, 2)

    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(cols[0], cols[0], cols[1], cols[2])


class TrueSkillFastPath(ColumnSummaries):
    """Displayed rating ``μ − 3σ``."""

    system_type = TrueSkill
    columns = (0, 1, 2)

    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(cols[0] - 3.0 * cols[1], cols[0], cols[1], cols[2])
