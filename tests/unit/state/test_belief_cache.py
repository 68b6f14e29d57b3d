"""The worker's belief cache (stream.state.cache): validity by gen, and the byte budget."""

from __future__ import annotations

from stream.state.cache import BeliefCache


def test_entries_are_valid_only_at_their_gen() -> None:
    c = BeliefCache(1 << 20)
    entry = c.fill("p", "3", {"a": b"xx", "b": None})
    assert entry.missing(["a", "b", "c"]) == ["c"] and entry.get_many(["b", "a"]) == {"b": None, "a": b"xx"}
    c.committed("p", "3", 4, {"c": b"yy"})
    assert c.pool("p").gen == "4" and c.pool("p").missing(["a", "b", "c"]) == []
    # a read at another gen (someone else wrote the pool) replaces everything known
    entry = c.fill("p", "9", {"c": b"zz"})
    assert entry.gen == "9" and entry.missing(["a", "b", "c"]) == ["a", "b"]
    # our commit from a gen the cache does not hold: only what it wrote is known
    c.committed("p", "5", 6, {"a": b"q"})
    assert c.pool("p").gen == "6" and c.pool("p").missing(["a", "c"]) == ["c"]
    c.drop("p")
    assert c.pool("p").gen is None and c.pool("p").missing(["a"]) == ["a"]


def test_budget_drops_other_pools_first_and_counts_exactly() -> None:
    c = BeliefCache(3000)  # each pool below holds 1,320 bytes by the count: both fit, not under 3/4
    c.fill("old", "1", {f"o{i}": b"v" * 10 for i in range(10)})
    c.fill("new", "1", {f"n{i}": b"v" * 10 for i in range(10)})
    assert set(c.pools) == {"old", "new"}
    for _ in range(50):  # rewriting the same players: the upper bound grows, the recount stays small
        c.committed("new", c.pool("new").gen or "", int(c.pool("new").gen or 0) + 1,
                    {f"n{i}": b"w" * 10 for i in range(10)})
    assert "new" in c.pools and c.nbytes <= 3000
    assert "old" not in c.pools  # over budget once: the other pool went first
    c.fill("new", c.pool("new").gen or "", {f"big{i}": b"v" * 100 for i in range(40)})
    assert "new" not in c.pools and c.nbytes == 0  # alone over the budget: dropped too


def test_disabled_cache_keeps_nothing() -> None:
    c = BeliefCache(0)
    entry = c.fill("p", "1", {"a": b"x"})
    assert entry.get_many(["a"]) == {"a": b"x"}  # the caller still gets the read back
    assert not c.enabled and "p" not in c.pools
