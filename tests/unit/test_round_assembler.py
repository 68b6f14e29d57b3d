"""RoundAssembler's public lifecycle: open, dispatched and held, closed or forgotten."""

from __future__ import annotations

from typing import Any

import pytest

from stream.events.rounds import OpenRound, RoundAssembler
from stream.events.validate import InvalidEvent


def _result(rid: str, player: str, rank: int) -> dict[str, Any]:
    return {"type": "round_result", "event_id": f"{rid}-{player}", "pool": "p", "round_id": rid, "time": 5,
            "player": player, "rank": rank}


def _completed(rid: str, n: int) -> dict[str, Any]:
    return {"type": "round_completed", "event_id": f"{rid}-done", "pool": "p", "round_id": rid, "time": 9,
            "participants": n}


def test_a_held_round_is_late_until_closed_and_assembled_again_once_forgotten() -> None:
    asm = RoundAssembler(close_on_dispatch=False)
    assert asm.add_result(_result("r", "a", 1), 0) is None
    assert asm.open_rounds() == [OpenRound("p", "r", 1, None, 0)] and len(asm) == 1
    assert asm.add_completed(_completed("r", 2), 0) is None
    ev = asm.add_result(_result("r", "b", 2), 0)
    assert ev is not None and ev.players == ["a", "b"] and len(asm) == 0
    assert not asm.is_closed("p", "r")  # held: its rating is not durable yet
    with pytest.raises(InvalidEvent, match="late event"):
        asm.add_result(_result("r", "c", 3), 0)
    asm.forget("p", "r")  # its rating failed: the same events assemble it again
    assert asm.add_result(_result("r", "a", 1), 1) is None
    assert asm.add_completed(_completed("r", 2), 1) is None
    again = asm.add_result(_result("r", "b", 2), 1)
    assert again is not None and again.players == ev.players and again.event_id == ev.event_id
    asm.close("p", "r")
    assert asm.is_closed("p", "r")
    with pytest.raises(InvalidEvent, match="late event"):
        asm.add_result(_result("r", "c", 3), 2)


def test_by_default_a_dispatched_round_is_closed() -> None:
    asm = RoundAssembler()
    asm.add_result(_result("r", "a", 1), 0)
    assert asm.add_completed(_completed("r", 1), 0) is not None
    assert asm.is_closed("p", "r")
    asm.clear()
    assert not asm.is_closed("p", "r") and asm.open_rounds() == []
