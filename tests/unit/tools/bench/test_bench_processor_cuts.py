"""``bench_processor history``'s take batches close as the worker's do: at the first record that brings a
batch to ``MMR_TAKE_MAX_BYTES`` (``BatchDelivery``), the rest of the file in the last one."""

from __future__ import annotations

from stream.service.messages import Message
from stream.tools.bench.processor import take_cuts


def test_a_take_closes_at_the_record_that_reaches_the_bound() -> None:
    mib = 1 << 20
    sizes = [mib // 2, mib // 2, mib // 4, 2 * mib, 10, 10]
    msgs = [Message("t", 0, i, b"x" * n) for i, n in enumerate(sizes)]
    assert take_cuts(msgs, 1) == [0, 2, 4]  # [½ + ½], [¼ + 2], [10 B + 10 B]
    assert take_cuts(msgs[:1], 1) == [0]
    assert take_cuts(msgs, 64) == [0]
