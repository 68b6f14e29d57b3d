"""``planning.split_steps``: how a pool's ops are cut into Redis steps of bounded player counts;
``planning.step_inputs``: where a step's rounds name their players among the step's.

The cut must keep every op, in order, never split one, and cut only where the next op
would take the step past the bound (greedy), except the last cut: the last two greedy steps
are cut again where the first part reaches half their players, when both parts stay within the
bound (so a batch does not end with a small leftover step). A step holding more players than
the bound is one op alone. The service tests check that steps change no result (the real histories
through a worker with a small bound equal the embedded replay).
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from stream.events.model import MatchBatch, RoundEvent
from stream.service.messages import Message
from stream.service.planning import MatchOp, RoundOp, split_steps, step_inputs

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
            ops.append(RoundOp(RoundEvent(event_id=f"r{k}", pool="x", round_id=f"r{k}", time=k, players=players,
                                          ranks=np.arange(len(players))), _MSG))
        else:
            batch = MatchBatch("x")
            for a, b in draw(st.lists(st.tuples(name, name), min_size=1, max_size=8)):
                batch.a.append(a)
                batch.b.append(b)
            ops.append(MatchOp(batch, [_MSG] * len(batch), [_MSG]))
    return ops


def _greedy(ops: list[RoundOp | MatchOp], bound: int) -> list[list[RoundOp | MatchOp]]:
    """The plain greedy cut: a step ends before the op that would take it past ``bound``."""
    steps: list[list[RoundOp | MatchOp]] = [[]]
    for op in ops:
        if steps[-1] and len(set().union(*map(_players, steps[-1]), _players(op))) > bound:
            steps.append([])
        steps[-1].append(op)
    return steps


@given(ops=_ops(), bound=st.integers(0, 20))
def test_steps_keep_every_op_in_order_and_cut_greedily_but_the_last_two_evened(ops: list[RoundOp | MatchOp],
                                                                              bound: int) -> None:
    steps = split_steps(ops, bound)
    assert [op for step in steps for op in step] == ops
    if bound == 0 or not ops:  # 0: no bound
        assert steps == [ops]
        return
    greedy = _greedy(ops, bound)
    assert len(steps) == len(greedy)
    assert steps[:-2] == greedy[:-2]  # every cut but the last is greedy
    for step in steps:
        assert step
        players = set().union(*map(_players, step))
        assert len(players) <= bound or len(step) == 1
    if len(steps) >= 2:
        last = greedy[-2] + greedy[-1]
        total = len(set().union(*map(_players, last)))
        k = next(j for j in range(1, len(last) + 1) if 2 * len(set().union(*map(_players, last[:j]))) >= total)
        halves = [last[:k], last[k:]]
        fits = k < len(last) and all(len(set().union(*map(_players, h))) <= bound for h in halves)
        assert steps[-2:] == (halves if fits else greedy[-2:])


def test_a_small_leftover_step_is_evened_with_the_step_before() -> None:
    """Rounds of 4 new players each. Bound 16, 5 rounds: greedy cuts 4 rounds (16 players) + 1 (4);
    the two steps hold 20 players, and the first part reaches half of them (10) at its third round,
    so the steps are 3 + 2 rounds (12 and 8 players). Bound 10, 6 rounds: greedy 2 + 2 + 2 is even
    already and stays."""
    def rnd(k: int) -> RoundOp:
        players = [f"p{k}-{i}" for i in range(4)]
        return RoundOp(RoundEvent(event_id=f"r{k}", pool="x", round_id=f"r{k}", time=k, players=players,
                                  ranks=np.arange(4)), _MSG)

    assert [len(s) for s in split_steps([rnd(k) for k in range(5)], 16)] == [3, 2]
    assert [len(s) for s in split_steps([rnd(k) for k in range(6)], 10)] == [2, 2, 2]


@given(ops=_ops())
def test_a_steps_places_name_each_rounds_players_among_the_steps_players_in_order(
        ops: list[RoundOp | MatchOp]) -> None:
    """The step's players are every player of its ops, first named first (what its read asks
    Redis for), and each round's places point at its own players there, in its order."""
    if not ops:
        return
    step = step_inputs(list(ops))
    names = [p for op in ops for p in (op.event.players if isinstance(op, RoundOp) else [*op.batch.a, *op.batch.b])]
    assert list(step.players) == list(dict.fromkeys(names))
    assert list(step.players.values()) == list(range(len(step.players)))
    assert len(step.at) == len(ops)
    order = list(step.players)
    for op, at in zip(ops, step.at, strict=True):
        if isinstance(op, RoundOp):
            assert at is not None and [order[k] for k in at.tolist()] == op.event.players
        else:
            assert at is None
