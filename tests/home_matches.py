"""Synthetic matches with a known home advantage, for tests that check it is learned back."""

from __future__ import annotations

import numpy as np

from stream.events.model import MatchEvent


def home_matches(h_elo: float, n: int = 12000, n_players: int = 120, seed: int = 5) -> list[MatchEvent]:
    """Matches whose first player wins with Elo's probability of (skill difference + ``h_elo``); a
    quarter neutral (no advantage)."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(1500.0, 150.0, n_players)
    out = []
    for i in range(n):
        a, b = rng.choice(n_players, 2, replace=False)
        neutral = bool(rng.random() < 0.25)
        p = 1.0 / (1.0 + 10.0 ** (-(skill[a] - skill[b] + (0.0 if neutral else h_elo)) / 400.0))
        out.append(MatchEvent(event_id=f"m{i}", pool="p", time=i * 1000, a=f"x{a}", b=f"x{b}",
                              score=float(rng.random() < p), neutral=neutral))
    return out
