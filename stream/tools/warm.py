"""``mmr warm``: compile the rating kernels into numba's cache before they are needed.

Why
---
numba compiles a kernel at its first call and keeps the machine code in its cache
(``stream.runtime.numba_cache``): the first run of a fresh install or of new kernel sources spends
tens of seconds compiling, later runs load the cache in well under a second. Running this
once, right after installing or while building an image, moves that wait out of the first
replay and out of a worker's first events.

It compiles what the service and the embedded replay use: each system's own warm-up
(``warmup()`` of its module: every variant and code path of its kernels), its rating of
stored bytes through the pool engine (the codecs, ``stream.service.worker.warm_encoded_path``),
and the index of applied event ids.

``--export DIR`` then copies the cache of these sources to ``DIR/<digest>`` with a manifest of
the versions and CPU it was built for: ``setup.py`` ships that in the wheel
(``stream.runtime.locator``), so a fresh install on a machine like the build's does not compile.
"""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import click

from stream.ratings import SYSTEMS


def warm_system(name: str, warmed_modules: set[str]) -> None:
    """Compile (or load) the kernels of system ``name``; its module's ``warmup()`` only once
    per module (``elo-mmr`` and ``elo-mmx`` share theirs)."""
    from stream.service.worker import warm_encoded_path

    module = SYSTEMS[name].split(":")[0]
    if module not in warmed_modules:
        warmed_modules.add(module)
        fn = getattr(importlib.import_module(module), "warmup", None)
        if callable(fn):
            fn()
    warm_encoded_path(name, {})


@click.command()
@click.option("--system", "systems", multiple=True, type=click.Choice(sorted(SYSTEMS)),
              help="A system to compile (repeatable; default: all).")
@click.option("--export", "export_to", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Then copy the cache to DIR/<sources digest> with its manifest (what a wheel ships).")
def warm(systems: tuple[str, ...], export_to: Path | None) -> None:
    """Compile the rating kernels into numba's cache (once per install and machine).

    Progress goes to stderr, one line per system; a warm cache makes this take a second or two."""
    from stream.engine import rating_columns
    from stream.events import _standings_scan
    from stream.runtime.compile_notice import cache_location, compile_notice
    from stream.service import kafka_batches
    from stream.state import commit_frames, id_index, packed_pool, tagged_pool

    names = list(dict.fromkeys(systems)) or sorted(SYSTEMS)
    t0 = time.perf_counter()
    with compile_notice(hint=""):
        id_index.warmup()
        _standings_scan.warmup()  # what every replay of a contest file runs
        packed_pool.warmup()  # the embedded store of Elo-MMR pools
        tagged_pool.warmup()  # the worker's steps of rounds, read into their arena
        commit_frames.warmup()  # the worker's commits of steps of rounds
        rating_columns.warmup()  # their rating messages
        kafka_batches.warmup()  # ... and those messages' record batches
        modules: set[str] = set()
        for i, name in enumerate(names, 1):
            t = time.perf_counter()
            warm_system(name, modules)
            click.echo(f"mmr warm: [{i}/{len(names)}] {name}: {time.perf_counter() - t:.1f} s", err=True)
    click.echo(f"mmr warm: {len(names)} systems ready in {time.perf_counter() - t0:.1f} s; "
               f"kernels cached in {cache_location()}", err=True)
    if export_to is not None:
        from stream.runtime import locator as _numba_locator

        try:
            click.echo(f"mmr warm: exported to {_numba_locator.export(export_to)}", err=True)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
