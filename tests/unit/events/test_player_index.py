"""``index_players`` / ``PlayerIndex.last_match`` against plain loops (the oracle)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from stream.events.model import MatchBatch, index_players

pairs = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)).filter(lambda ab: ab[0] != ab[1]),
                 min_size=1, max_size=40)


@given(pairs)
def test_index_and_last_match_equal_plain_loops(ps: list[tuple[int, int]]) -> None:
    batch = MatchBatch("p", event_ids=[f"e{j}" for j in range(len(ps))], a=[f"x{a}" for a, _ in ps],
                       b=[f"x{b}" for _, b in ps], scores=[1.0] * len(ps), times=list(range(len(ps))))
    idx = index_players(batch)
    order: list[str] = []
    for p in batch.a + batch.b:  # first appearance over the a column, then the b column
        if p not in order:
            order.append(p)
    assert idx.players == order
    assert [idx.players[i] for i in idx.a.tolist()] == batch.a
    assert [idx.players[i] for i in idx.b.tolist()] == batch.b
    last: dict[str, int] = {}
    for j, (a, b) in enumerate(zip(batch.a, batch.b, strict=True)):
        last[a] = last[b] = j
    assert dict(zip(idx.players, idx.last_match().tolist(), strict=True)) == last
