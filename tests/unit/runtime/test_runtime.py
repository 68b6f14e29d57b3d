"""Importing the package has no side effects; numba is configured where kernels are defined (``stream.runtime``)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

import stream

ROOT = Path(stream.__file__).parent
GATE = "stream.runtime.configured"

_PROBE = """
import os, sys
before = dict(os.environ)
import {module}
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k))
loaded = sorted({{m.split('.')[0] for m in sys.modules}} & {{'numba', 'numpy', 'llvmlite', 'faust', 'redis'}})
print(loaded, changed)
"""


@pytest.mark.parametrize("module", ["stream", "stream.client", "stream.events.check", "stream.events.schema",
                                    "stream.events.model", "stream.errors", "stream.cli"])
def test_importing_the_light_modules_loads_no_numba_nor_numpy_and_changes_no_environment(module: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "OMP_"))}
    out = subprocess.run([sys.executable, "-c", _PROBE.format(module=module)], env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[] []"


def _numba_imports(tree: ast.Module) -> list[int]:
    return [n.lineno for n in tree.body
            if (isinstance(n, ast.Import) and any(a.name.split(".")[0] == "numba" for a in n.names))
            or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] == "numba")]


def _gate(tree: ast.Module) -> int | None:
    return next((n.lineno for n in tree.body if isinstance(n, ast.Import) and any(a.name == GATE for a in n.names)),
                None)


def test_every_module_that_imports_numba_configures_it_first() -> None:
    """numba reads its cache directory and thread count when it is imported: a module that imports it
    imports ``stream.runtime.configured`` on a line before, so no entry path loads an unconfigured numba."""
    late = {}
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text())
        lines = _numba_imports(tree)
        gate = _gate(tree)
        if lines and (gate is None or gate > min(lines)):
            late[path.relative_to(ROOT).as_posix()] = gate
    assert late == {}
    assert _numba_imports(ast.parse("import numba as nb\nfrom numba.core import event\nimport numbat\n")) == [1, 2]


def test_a_kernel_module_imported_first_finds_numba_configured(tmp_path: Path) -> None:
    code = ("import stream.ratings.elo_mmr.kernels, numba, os; "
            "print(numba.config.CACHE_DIR, os.environ['OMP_WAIT_POLICY'])")
    env = {"NUMBA_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    cache_dir, policy = out.stdout.split()
    assert Path(cache_dir).parent == tmp_path and policy == "PASSIVE"


def test_configure_runs_once() -> None:
    from stream import runtime

    runtime.configure()
    before = dict(os.environ)
    runtime.configure()
    assert dict(os.environ) == before


def test_the_limits_are_the_schemas_and_every_input_schema_states_the_same() -> None:
    from stream.events.check import INPUT_TYPES
    from stream.events.schema import limits, schema

    lim = limits()
    assert (lim.event_id_length, lim.pool_length, lim.player_length, lim.round_id_length) == (256, 128, 128, 256)
    assert (lim.min_time, lim.max_time) == (-(2**63), 2**63 - 1)
    expected = {"event_id": lim.event_id_length, "pool": lim.pool_length, "round_id": lim.round_id_length,
                "a": lim.player_length, "b": lim.player_length, "player": lim.player_length}

    def walk(node: object, name: str = "") -> None:
        if isinstance(node, dict):
            if "maxLength" in node and name in expected:
                assert node["maxLength"] == expected[name], (name, node)
            if name == "time" and "minimum" in node:
                assert (node["minimum"], node["maximum"]) == (lim.min_time, lim.max_time)
            for key, value in node.items():
                walk(value, key if key not in ("properties", "items") else name)
        elif isinstance(node, list):
            for value in node:
                walk(value, name)

    for etype in INPUT_TYPES:
        walk(schema(etype))
