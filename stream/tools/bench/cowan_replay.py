"""Cowan's whole embedded replay against openskill.py's plain 1-v-1 loop, side by side.

The comparison a user makes: the same file of matches, each program a whole process (imports,
the numba cache, reading and checking every line, rating, writing the output): ``mmr replay FILE
--system cowan --embedded`` against a plain loop rating every match with openskill's
``PlackettLuce``. The matches are neutral (openskill takes no side advantage; a match that is not
neutral is rated alone with a learned one, which is not the same work). Runs alternate, so load
from other jobs hits both alike; printed: each run's wall and CPU, and the ratio of rates, ours /
openskill's (≥ 1: the replay is at least as fast).

``python -m stream.tools.bench.cowan_replay FILE`` runs the openskill loop alone.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click
import orjson

from stream.files import write_jsonl_atomic
from stream.tools.bench import timed
from stream.tools.synth import synth_matches


def openskill_loop(path: str) -> int:
    """Rate every match of an event JSONL with openskill's PlackettLuce, one call per match."""
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    ratings: dict[str, Any] = {}
    new = model.rating
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            m = orjson.loads(line)
            a, b, score = m["a"], m["b"], m["score"]
            ra = ratings.get(a) or new()
            rb = ratings.get(b) or new()
            ranks = [1.0, 2.0] if score == 1.0 else [2.0, 1.0] if score == 0.0 else [1.0, 1.0]
            (na,), (nb,) = model.rate([[ra], [rb]], ranks=ranks)
            ratings[a] = na
            ratings[b] = nb
            n += 1
    return n


def side_by_side(matches: int, players: int, pairs: int, seed: int) -> None:
    """Write the matches, then alternate the two programs ``pairs`` times and print each run."""
    with tempfile.TemporaryDirectory(prefix="mmr-bench-cowan-") as tmp:
        src = str(Path(tmp) / "matches.jsonl")
        write_jsonl_atomic(src, synth_matches(players, 100, matches, seed))
        ours = [sys.executable, "-m", "stream.cli", "replay", src, "--system", "cowan", "--embedded",
                "--out", str(Path(tmp) / "ratings.jsonl"), "--no-progress"]
        theirs = [sys.executable, "-m", "stream.tools.bench.cowan_replay", src]
        click.echo(f"whole process, {matches:,} neutral matches among {players:,} players (`mmr synth --kind "
                   f"matches --seed {seed}`: no side advantage), load average {os.getloadavg()[0]:.2f}; first a run "
                   "of ours to load numba's cache")
        timed(ours)
        click.echo(f"{'run':>3}  {'mmr replay wall / CPU s':>24}  {'openskill wall / CPU s':>23}  "
                   f"{'ratio wall':>10}  {'ratio CPU':>9}")
        for i in range(1, pairs + 1):
            (w1, c1, _), (w2, c2, _) = timed(ours), timed(theirs)
            click.echo(f"{i:>3}  {w1:>11.2f} / {c1:>10.2f}  {w2:>10.2f} / {c2:>10.2f}  {w2 / w1:>10.2f}  "
                       f"{c2 / c1:>9.2f}")
        click.echo("ratio = our rate / openskill's (the same matches): >= 1 means the replay keeps up; "
                   f"load average now {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    t0, c0 = time.perf_counter(), time.process_time()
    count = openskill_loop(sys.argv[1])
    print(f"{count} matches in {time.perf_counter() - t0:.2f} s ({time.process_time() - c0:.2f} s CPU)")
