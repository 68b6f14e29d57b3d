"""The registry is the one list of rating systems, and every spec in it says true things.

Each ``SystemSpec`` claims what its system can rate, which codec stores its beliefs and how the
lobby predicts its teams; these tests build every registered system, rate a tiny round and match
set per those claims (and check that what it does not claim is refused), round-trip its codec
and scan ``stream/`` for any other table of system names.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from repo_paths import ROOT as REPO_ROOT

from stream.ratings import RatingError, RatingSystem, lobby
from stream.ratings.codec import Float64Codec, codec_for
from stream.ratings.fastpath import FastPath, fast_path
from stream.ratings.registry import SPECS, spec
from stream.ratings.spec import SystemSpec, load

ROOT = REPO_ROOT / "stream"
NAMES = list(SPECS)
#: tables keyed by words that happen to be system names but list something else
NOT_SYSTEMS = {
    "stream/tools/bench/command.py": "the benchmarks by name (``mmr bench elo-mmr`` times the Elo-MMR kernels)",
}


def _tables_of_names(path: Path) -> list[tuple[int, list[str]]]:
    """Every list, tuple, set or dict literal of ``path`` holding two or more system names as its
    own items (a dict: as keys)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.List | ast.Tuple | ast.Set):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        names = [v for i in items if isinstance(i, ast.Constant) and isinstance(v := i.value, str) and v in SPECS]
        if len(set(names)) >= 2:
            found.append((node.lineno, names))
    return found


def test_no_module_but_the_registry_lists_systems() -> None:
    """A second table of systems would have to be kept equal to the registry by hand."""
    found = {str(p.relative_to(ROOT.parent)): t for p in sorted(ROOT.rglob("*.py")) if (t := _tables_of_names(p))}
    assert set(NOT_SYSTEMS) <= set(found), "a table listed in NOT_SYSTEMS is gone: drop it from the list"
    assert {k: v for k, v in found.items() if k not in NOT_SYSTEMS} == {}


def test_the_scan_finds_a_table() -> None:
    """The scan above would catch a copy of the lobby's old name set (it can fail)."""
    tree_text = 'SUM_MODELS = frozenset({"elo-mmr", "elo-mmx", "trueskill"})\nx = ("cowan",)\n'
    probe = ROOT.parent / "build" / "registry_scan_probe.py"
    probe.parent.mkdir(exist_ok=True)
    try:
        probe.write_text(tree_text)
        assert _tables_of_names(probe) == [(1, ["elo-mmr", "elo-mmx", "trueskill"])]
    finally:
        probe.unlink()


def test_specs_are_named_as_their_systems() -> None:
    assert NAMES == ["elo-mmr", "elo-mmx", "cowan", "elo", "glicko", "trueskill", "codeforces", "topcoder"]
    for name, s in SPECS.items():
        assert s.name == name and s.system_type().name == name
        assert s.params_type() is s.system_type().params_type
    with pytest.raises(RatingError, match="unknown system 'nope'; choose one of elo-mmr, elo-mmx"):
        spec("nope")


def test_reading_the_registry_imports_no_numba() -> None:
    """``mmr --help`` lists the systems: the registry names its classes, it does not import them."""
    probe = ("import sys; import stream.ratings.registry, stream.ratings; "
             "print(sorted(m for m in sys.modules if m.split('.')[0] == 'numba' "
             "or m.endswith(('.system', '.fastpath', '.codec'))))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stdout + out.stderr


def _round(system: RatingSystem, n: int) -> list[np.ndarray]:
    beliefs = [system.new_belief() for _ in range(n)]
    return system.rate_round(beliefs, np.arange(1, n + 1, dtype=np.int64), 0)


@pytest.mark.parametrize("name", NAMES)
def test_every_spec_builds_and_rates_what_it_claims(name: str) -> None:
    s: SystemSpec = SPECS[name]
    system = s.build({})
    # two-player rounds and matches: every system
    two = _round(system, 2)
    assert len(two) == 2 and not np.array_equal(two[0], two[1])
    a, b = np.array([0, 1, 2], dtype=np.int64), np.array([1, 2, 0], dtype=np.int64)
    out = system.rate_matches([system.new_belief() for _ in range(3)], a, b, np.array([1.0, 0.0, 0.5]),
                              np.array([0, 1, 2], dtype=np.int64))
    assert len(out) == 3 and all(np.all(np.isfinite(x)) for x in out)
    # more players
    if s.multiplayer_rounds:
        assert len(_round(system, 4)) == 4
    else:
        with pytest.raises(RatingError, match="only two-player rounds"):
            _round(system, 3)
    # teams
    team_of, team_ranks = np.array([0, 0, 1, 1], dtype=np.int64), np.array([1, 2], dtype=np.int64)
    overrides = type(system).rate_team_round is not RatingSystem.rate_team_round
    assert overrides == s.team_rounds
    if s.team_rounds:
        assert len(system.rate_team_round([system.new_belief() for _ in range(4)], team_of, team_ranks, 0)) == 4
    else:
        with pytest.raises(RatingError, match="does not rate team rounds"):
            system.rate_team_round([system.new_belief() for _ in range(4)], team_of, team_ranks, 0)


@pytest.mark.parametrize("name", NAMES)
def test_every_spec_has_its_fast_path_codec_and_warmups(name: str) -> None:
    s = SPECS[name]
    system = s.build()
    path = fast_path(system)
    assert s.fast_path is not None and type(path) is load(s.fast_path) and type(path) is not FastPath
    codec = codec_for(name)
    assert type(codec) is load(s.codec)
    beliefs = [*_round(system, 2), system.new_belief()]
    data = codec.encode_many(beliefs)
    back = codec.decode_many(data)
    if codec.lossless:
        assert [x.tobytes() for x in back] == [x.tobytes() for x in beliefs]
    # lossy or not, a decoded belief is a fixed point: it encodes to the very bytes it came from
    assert codec.encode_many(back) == data
    fns = s.warmup_functions()
    assert len(fns) == len(s.warmups) and all(callable(f) for f in fns)


@pytest.mark.parametrize("name", NAMES)
def test_the_lobby_predicts_teams_per_the_spec(name: str) -> None:
    s = SPECS[name]
    system = s.build()
    one, two = _round(system, 2)
    pair = lobby.predict(system, [[one], [two]])
    assert (pair.draw is not None) == s.draws
    assert pair.expected_score == pytest.approx(system.win_probability(one, two), abs=1e-12)
    teams = [[one, two], [system.new_belief(), system.new_belief()]]
    if s.team_model == "pair":
        with pytest.raises(lobby.LobbyRefused):
            lobby.predict(system, teams)
    else:
        assert 0.0 <= lobby.predict(system, teams).win[0] <= 1.0


def test_the_float64_layout_is_the_codecs() -> None:
    """Stored value = ``tag`` + ``pack(belief)``; ``unpack`` of the part past the tag gives the belief again."""
    codec = Float64Codec()
    beliefs = [np.array([1500.0, 350.0, -0.0, np.inf]), np.array([], dtype=np.float64), np.arange(7.0)]
    data = codec.encode_many(beliefs)
    assert data == [codec.tag + codec.pack(b) for b in beliefs] == [codec.encode(b) for b in beliefs]
    assert codec.encode(np.empty(0)) == codec.tag
    for d, b in zip(data, beliefs, strict=True):
        back = codec.unpack(memoryview(d)[len(codec.tag):])
        assert back.flags.writeable and back.tobytes() == b.tobytes()


def test_encode_flat_is_encode_of_each_slice() -> None:
    codec = Float64Codec()
    values, offsets = np.arange(9.0), np.array([0, 2, 2, 9], dtype=np.int64)
    assert codec.encode_flat(values, offsets) == [codec.encode(values[a:b]) for a, b in pairwise(offsets.tolist())]
