"""``mmr teams-csv``: team results in a CSV (one row per player) → team ``round`` events (JSONL).

Why: team results come as tables (match sheets, lobby logs), a row per player of a game, and
``mmr eval`` / ``mmr replay`` read events. The columns:

    event_id,time,team,rank,player[,weight][,side][,pool]

* ``event_id``: the game; its rows may be anywhere in the file, games come out in the order of
  their first row (sort the file by time first: ratings are sequential);
* ``time``: milliseconds since the epoch or an ISO 8601 date/time (UTC unless it says);
* ``team``: any label, unique within the game; ``rank``: the team's place, 1 = best, equal =
  tie (every row of a team must give the same rank);
* ``player``: the player id; ``weight`` (optional, empty = 1): the part of the game the player
  played, in (0, 1]; ``side`` (optional, empty = none): the team's side label (``home``/``away``,
  ``blue``/``red``; at most 32 characters, the same for every row of a team), whose learned
  advantage the team plays with (docs/advantage.md); ``pool`` (optional): the pool (default ``--pool``).

Every event is checked by the worker's own decoder before it is written, so a bad row stops
the conversion with its file and line.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from typing import Any

import click

from stream.events.inputs import InputError, _parse_time, open_text
from stream.events.validate import InvalidEvent, decode_event
from stream.files import write_jsonl_atomic
from stream.tools.common import exit_on_bad_input

REQUIRED = ("event_id", "time", "team", "rank", "player")


def read_team_csv(path: str, pool: str = "default") -> Iterator[dict[str, Any]]:
    """The team ``round`` events of a team CSV (module docstring), checked."""
    games: dict[str, dict[str, Any]] = {}
    first_line: dict[str, int] = {}
    with open_text(path) as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path}:1", f"missing column(s) {', '.join(missing)}")
        for row in reader:
            where = f"{path}:{reader.line_num}"
            gid = row["event_id"].strip()
            game = games.get(gid)
            if game is None:
                game = games[gid] = {"type": "round", "event_id": gid, "pool": (row.get("pool") or pool).strip(),
                                     "round_id": gid, "time": _parse_time(row["time"], where), "teams": {}}
                first_line[gid] = reader.line_num
            try:
                rank = int(row["rank"])
                weight = float(row["weight"]) if (row.get("weight") or "").strip() else 1.0
            except ValueError:
                raise InputError(where, f"cannot parse rank {row['rank']!r} or weight {row.get('weight')!r}") from None
            team = game["teams"].setdefault(row["team"].strip(), {"players": [], "rank": rank, "weights": []})
            if team["rank"] != rank:
                raise InputError(where, f"team {row['team']!r} of {gid!r} has ranks {team['rank']} and {rank}")
            side = (row.get("side") or "").strip()
            if team["players"] and team.get("side", "") != side:
                raise InputError(where, f"team {row['team']!r} of {gid!r} has sides {team.get('side', '')!r} "
                                        f"and {side!r}")
            if side:
                team["side"] = side
            team["players"].append(row["player"].strip())
            team["weights"].append(weight)
    for gid, game in games.items():
        teams = []
        for team in game["teams"].values():
            if all(w == 1.0 for w in team["weights"]):
                del team["weights"]
            teams.append(team)
        event = {**game, "teams": teams}
        try:
            decode_event(event)
        except (InvalidEvent, ValueError) as exc:
            raise InputError(f"{path}:{first_line[gid]}", f"event {gid!r}: {exc}") from None
        yield event


@click.command("teams-csv")
@click.argument("path", type=click.Path(exists=True, dir_okay=False))
@click.option("--out", type=click.Path(dir_okay=False), required=True, help="Output event JSONL.")
@click.option("--pool", default="default", show_default=True, help="Pool of rows without a pool column.")
def teams_csv(path: str, out: str, pool: str) -> None:
    """Convert a team CSV (one row per player: event_id,time,team,rank,player[,weight][,side][,pool]) to events."""
    with exit_on_bad_input():
        n = write_jsonl_atomic(out, read_team_csv(path, pool))
    click.echo(f"wrote {n} team rounds to {out}", err=True)
