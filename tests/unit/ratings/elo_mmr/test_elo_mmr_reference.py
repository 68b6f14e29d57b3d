"""Our Elo-MMR / Elo-MMχ against the Rust reference (pip ``Elo-MMR-Py``) on whole histories.

``history_limit=0`` because the reference's exact ``mmr`` keeps every logistic term.
"""

from __future__ import annotations

import itertools
import lzma
from typing import Any

import numpy as np
import orjson
import pytest
from repo_paths import SHARED_DATA

from stream.ratings.elo_mmr.system import EloMMR, EloMMX

elo_mmr_py = pytest.importorskip("elo_mmr_py", reason="elo_mmr_py (the reference) is not installed")

# The shared data folder sits beside the repository (../shared/data); tests needing it skip without it.
CODEFORCES = SHARED_DATA / "codeforces/contests-2010-2020.jsonl.xz"

Contest = dict[str, Any]


def _synthetic(seed: int, players: int = 300, rounds: int = 25) -> list[Contest]:
    """Rounds of a random subset ranked by noisy skill, rounded so that ties occur."""
    rng = np.random.default_rng(seed)
    skill = rng.normal(0.0, 1.0, players)
    t = 1_600_000_000
    contests: list[Contest] = []
    for r in range(rounds):
        size = int(rng.integers(2, min(200, players)))
        who = rng.choice(players, size=size, replace=False)
        score = np.round(skill[who] + rng.normal(0.0, 1.0, size), 1)  # ~ties
        order = np.argsort(-score, kind="stable")
        standings = []
        pos = 0
        for _, group in itertools.groupby(order.tolist(), key=lambda i: score[i]):
            members = list(group)
            standings += [[f"p{who[i]}", pos, pos + len(members) - 1] for i in members]
            pos += len(members)
        t += int(rng.integers(0, 30)) * 86_400
        contests.append({"name": f"r{r}", "time_seconds": t, "standings": standings})
    return contests


def _codeforces(n: int) -> list[Contest]:
    with lzma.open(CODEFORCES, "rb") as fh:
        return [orjson.loads(line) for line in itertools.islice(fh, n)]


def _ours(system: EloMMR, contests: list[Contest]) -> dict[str, np.ndarray]:
    beliefs: dict[str, np.ndarray] = {}
    for c in contests:
        names = [s[0] for s in c["standings"]]
        ranks = np.array([s[1] + 1 for s in c["standings"]])
        current = [beliefs[n] if n in beliefs else system.new_belief() for n in names]
        beliefs.update(zip(names, system.rate_round(current, ranks, c["time_seconds"] * 1000), strict=True))
    return beliefs


def _reference(system: Any, contests: list[Contest]) -> dict[str, Any]:
    ref_contests = [
        elo_mmr_py.Contest(standings=[tuple(s) for s in c["standings"]], name=c["name"],
                           time_seconds=c["time_seconds"])
        for c in contests
    ]
    return elo_mmr_py.rate_latest(ref_contests, system=system)


def _assert_match(ours: dict[str, np.ndarray], ref: dict[str, Any], tol: float = 1e-3) -> None:
    assert set(ours) == set(ref)
    dmu = max(abs(float(ours[k][0]) - ref[k].mu) for k in ref)
    dsig = max(abs(float(ours[k][1]) - ref[k].sig) for k in ref)
    assert dmu < tol and dsig < tol, f"max |Δμ| {dmu:.3g}, max |Δσ| {dsig:.3g}"
    assert all(int(ours[k][4]) == ref[k].contests_played for k in ref)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize(("cls", "name"), [(EloMMR, "mmr"), (EloMMX, "mmx")])
def test_synthetic_matches_reference(seed: int, cls: type[EloMMR], name: str) -> None:
    contests = _synthetic(seed)
    _assert_match(_ours(cls({"history_limit": 0}), contests), _reference(name, contests))


@pytest.mark.parametrize("split", [False, True])
def test_synthetic_options_match_reference(split: bool) -> None:
    """noob_delay, continuous drift and split ties through the reference's EloMmrConfig."""
    contests = _synthetic(5, players=150, rounds=20)
    options = {"noob_delay": [0.3, 0.6, 0.8], "drift_per_day": 40.0, "split_ties": split}
    ours = _ours(EloMMR({"history_limit": 0, **options, "noob_delay": (0.3, 0.6, 0.8)}), contests)
    _assert_match(ours, _reference(elo_mmr_py.EloMmrConfig("mmr", **options), contests))


@pytest.mark.data
@pytest.mark.skipif(not CODEFORCES.exists(), reason=f"shared data absent: {CODEFORCES} (needs ../shared/data)")
@pytest.mark.parametrize(("cls", "name"), [(EloMMR, "mmr"), (EloMMX, "mmx")])
def test_codeforces_first_contests_match_reference(cls: type[EloMMR], name: str) -> None:
    contests = _codeforces(30)
    _assert_match(_ours(cls({"history_limit": 0}), contests), _reference(name, contests))
