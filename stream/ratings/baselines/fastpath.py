"""The engine's fast paths of the baseline systems: summaries read from fixed columns. Each gives
exactly the float64 operations of the system's own ``summary``, on columns."""

from __future__ import annotations

from typing import ClassVar

from stream.ratings.base import FloatArray, Rating
from stream.ratings.baselines.codeforces import Codeforces
from stream.ratings.baselines.elo import Elo
from stream.ratings.baselines.glicko import Glicko
from stream.ratings.baselines.topcoder import TopCoder
from stream.ratings.baselines.trueskill import TrueSkill
from stream.ratings.fastpath import ColumnSummaries, ratings_from_columns


class EloFastPath(ColumnSummaries):
    """Belief ``[rating, rounds]``: the summary is ``(r, r, 0, rounds)``."""

    system_type: ClassVar[type] = Elo
    columns = (0, 1)

    def ratings(self, cols: FloatArray) -> list[Rating] | None:
        return ratings_from_columns(cols[0], cols[0], 0.0, cols[1])


class CodeforcesFastPath(EloFastPath):
    """The same belief layout and summary as Elo's."""

    system_type = Codeforces


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
