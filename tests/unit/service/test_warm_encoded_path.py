"""The worker's warm-up rates valid events with every system and lets a real error through."""

from __future__ import annotations

import pytest

from stream.engine.pool import PoolEngine
from stream.ratings import SYSTEMS
from stream.ratings.base import RatingError
from stream.service.worker import warm_encoded_path


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_every_system_warms_up(name: str) -> None:
    warm_encoded_path(name, {})


def test_a_rating_error_is_not_swallowed(monkeypatch: pytest.MonkeyPatch) -> None:
    """A system that cannot rate the warm-up's round stops the start instead of warming nothing."""

    def refuse(self: PoolEngine, *args: object, **kwargs: object) -> None:
        raise RatingError("refused")

    monkeypatch.setattr(PoolEngine, "apply_round", refuse)
    with pytest.raises(RatingError, match="refused"):
        warm_encoded_path("elo", {})
