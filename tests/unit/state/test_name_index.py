"""``NameIndex`` answers as a dict of the names it was given would (``stream.state.name_index``)."""

from __future__ import annotations

import numpy as np
import pytest

from stream.state.name_index import NameIndex


def test_indices_in_the_order_added_across_growth() -> None:
    names = [f"p{i}" for i in range(5000)] + ["é", "名前", "x\udcff", "\x00", "", "a\nb"]
    index = NameIndex()
    for a in range(0, len(names), 333):  # many adds: the table and the name buffer grow several times
        index.add(names[a: a + 333])
    assert len(index) == len(names)
    assert index.lookup(names).tolist() == list(range(len(names)))
    assert index.lookup(["p5000", "e", "x\udcfe", "\x00\x00"]).tolist() == [-1, -1, -1, -1]
    assert index["名前"] == names.index("名前") and "" in index and "nobody" not in index and 3 not in index
    assert index.get("nobody", -7) == -7
    with pytest.raises(KeyError):
        index["nobody"]


def test_a_name_held_already_is_refused_and_changes_nothing() -> None:
    index = NameIndex()
    index.add(["a", "b"])
    with pytest.raises(ValueError, match="twice"):
        index.add(["b"])
    index.add(["c"])
    assert index.lookup(["a", "b", "c"]).tolist() == [0, 1, 2]


def test_a_lookup_of_no_names_and_an_add_of_none() -> None:
    index = NameIndex()
    index.add([])
    assert len(index) == 0
    assert index.lookup([]).dtype == np.int64 and index.lookup([]).shape == (0,)
