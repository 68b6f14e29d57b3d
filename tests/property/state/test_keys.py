"""Key names: no two distinct names share a key, and all keys of a pool share its hash slot."""

from __future__ import annotations

from urllib.parse import unquote

from hypothesis import given, settings
from hypothesis import strategies as st
from redis.crc import key_slot

from stream.state.keys import POOL_SUFFIXES, KeySpace, escape, escape_all

# names built mostly from the characters that structure a key, so that collisions are likely if possible
_tricky = st.text(alphabet=st.sampled_from(["{", "}", ":", "%", "p", "l", "b", "3", "A", "7", "D", "2", "5", "x"]),
                  min_size=1, max_size=12)
names = _tricky | st.text(min_size=1, max_size=12)
KS = KeySpace("mmr")


def _keys_of(pool: str, players: list[str], rounds: list[str]) -> dict[str, tuple[str, ...]]:
    """Every key of the pool -> what it is for."""
    out: dict[str, tuple[str, ...]] = {KS.key(pool, s): (pool, "suffix", s) for s in POOL_SUFFIXES}
    out.update({KS.player_key(pool, p): (pool, "player", p) for p in players})
    out.update({KS.pend_key(pool, r): (pool, "round", r) for r in rounds})
    return out


@settings(max_examples=500, deadline=None)
@given(st.lists(st.tuples(names, st.lists(names, max_size=6), st.lists(names, max_size=3)), min_size=1, max_size=4,
                unique_by=lambda t: t[0]))
def test_distinct_names_never_share_a_key_and_a_pool_keeps_one_slot(pools: list[tuple[str, list[str],
                                                                                     list[str]]]) -> None:
    owner: dict[str, tuple[str, ...]] = {}
    for pool, players, rounds in pools:
        keys = _keys_of(pool, players, rounds)
        # within the pool: as many keys as distinct (kind, name)
        assert len(keys) == len(POOL_SUFFIXES) + len(set(players)) + len(set(rounds))
        for k, what in keys.items():
            assert owner.setdefault(k, what) == what, (k, owner[k], what)
        slots = {key_slot(k.encode()) for k in keys}
        assert slots == {key_slot(escape(pool).encode())}, pool
    assert KS.pools_key() not in owner


@settings(max_examples=300, deadline=None)
@given(names)
def test_escape_is_invertible_and_leaves_no_structural_character(name: str) -> None:
    e = escape(name)
    assert unquote(e) == name  # (percent-encoding: ``escape`` encodes ``%`` too)
    assert not set(e) & set("{}:")


@settings(max_examples=300, deadline=None)
@given(st.lists(names, max_size=8) | st.lists(st.text(alphabet="abc-_1", max_size=5), max_size=8))
def test_escape_all_is_escape_of_each(batch: list[str]) -> None:
    assert escape_all(batch) == [escape(n) for n in batch]


@settings(max_examples=300, deadline=None)
@given(pool=names, batch=st.lists(names, max_size=8) | st.lists(st.text(alphabet="abc-_1", max_size=5), max_size=8))
def test_player_keys_are_each_players_key(pool: str, batch: list[str]) -> None:
    assert KS.player_keys(pool, batch) == [KS.player_key(pool, n) for n in batch]
    assert KS.player_keys(pool, tuple(batch)) == KS.player_keys(pool, batch)


def test_the_adversarial_names_of_the_issue_have_separate_keys() -> None:
    # pool "kc}:p:x"'s leaderboard was pool "kc"'s player "x}:lb" when names were not escaped
    assert KS.key("kc}:p:x", "lb") != KS.player_key("kc", "x}:lb")
    assert "mmr:{" + "kc}:p:x" + "}:lb" == "mmr:{" + "kc" + "}:p:" + "x}:lb"
    assert key_slot(KS.key("kc}:p:x", "lb").encode()) == key_slot(KS.key("kc}:p:x", "gen").encode())
    assert KS.player_key("plain", "name") == "mmr:{plain}:p:name"  # names without those characters keep their keys
