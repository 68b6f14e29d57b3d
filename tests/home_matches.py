"""Synthetic matches and team rounds with a known home advantage, for tests that check it is learned back."""

from __future__ import annotations

import json

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


def sided_round_lines(home_edge: float, n: int = 1200, n_players: int = 40, seed: int = 4) -> list[str]:
    """``round`` events (JSON lines) of two teams of three labelled ``home`` and ``away``, pool ``league``:
    the home team wins with Elo's probability of (its mean skill minus the other's + ``home_edge``)."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(1500.0, 150.0, n_players)
    lines = []
    for i in range(n):
        who = rng.choice(n_players, 6, replace=False)
        d = skill[who[:3]].mean() - skill[who[3:]].mean() + home_edge
        win = bool(rng.random() < 1.0 / (1.0 + 10.0 ** (-d / 400.0)))
        teams = [{"players": [f"x{j}" for j in who[:3].tolist()], "rank": 1 if win else 2, "side": "home"},
                 {"players": [f"x{j}" for j in who[3:].tolist()], "rank": 2 if win else 1, "side": "away"}]
        lines.append(json.dumps({"type": "round", "event_id": f"r{i}", "pool": "league", "round_id": f"r{i}",
                                 "time": 1_700_000_000_000 + i * 3_600_000, "teams": teams}))
    return lines
