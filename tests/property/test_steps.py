"""``planning.split_steps``: how a pool's ops are cut into Redis steps of bounded player counts.

The cut must keep every op, in order, never split one, and cut only where the next op
would take the step past the bound (greedy): a step holding more players than the bound
is one op alone. The service tests check that steps change no result (the real histories
through a worker with a small bound equal the embedded replay).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from stream.events.model import MatchBatch, RoundEvent
from stream.service.messages import Message
from stream.service.planning import MatchOp, RoundOp, split_steps

_MSG = Message("t", 0, 0, b"", None, None)


def _players(op: RoundOp | MatchOp) -> set[str]:
    return set(op.event.players) if isinstance(op, RoundOp) else {*op.batch.a, *op.batch.b}


@st.composite
def _ops(draw: st.DrawFn) -> list[RoundOp | MatchOp]:
    ops: list[RoundOp | MatchOp] = []
    name = st.integers(0, 30).map(lambda i: f"p{i}")
    for k in range(draw(st.integers(0, 12))):
        if draw(st.booleans()):
            players = draw(st.lists(name, min_size=1, max_size=12, unique=True))
            ops.append(RoundOp(RoundEvent(f"r{k}", "x", f"r{k}", k, players, np.arange(len(players))), _MSG))
        else:
            batch = MatchBatch("x")
            for a, b in draw(st.lists(st.tuples(name, name), min_size=1, max_size=8)):
                batch.a.append(a)
                batch.b.append(b)
            ops.append(MatchOp(batch, [_MSG] * len(batch), [_MSG]))
    return ops


@given(ops=_ops(), bound=st.integers(0, 20))
def test_steps_keep_every_op_in_order_and_cut_greedily_at_the_bound(ops: list[RoundOp | MatchOp],
                                                                   bound: int) -> None:
    steps = split_steps(ops, bound)
    assert [op for step in steps for op in step] == ops
    if bound == 0 or not ops:  # 0: no bound
        assert steps == [ops]
        return
    for i, step in enumerate(steps):
        assert step
        players = set().union(*map(_players, step))
        assert len(players) <= bound or len(step) == 1
        if i + 1 < len(steps):  # cut only where the next op would pass the bound
            assert len(players | _players(steps[i + 1][0])) > bound
