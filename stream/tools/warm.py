"""``mmr warm``: compile the rating kernels into numba's cache before they are needed.

Why: numba compiles a kernel at its first call and keeps the machine code in its cache
(``stream.runtime.numba_cache``); run once after installing or while building an image, this moves
that wait out of the first replay and a worker's first events. It compiles what the service and the
embedded replay use, by the worker's own warm-up (``warm_shared``, ``warm_system``). ``--export DIR``
then copies the cache with a manifest of the versions and CPU it was built for to ``DIR/<digest>``:
``setup.py`` ships that in the wheel (``stream.runtime.locator``).
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from stream.ratings.registry import SPECS


@click.command()
@click.option("--system", "systems", multiple=True, type=click.Choice(sorted(SPECS)),
              help="A system to compile (repeatable; default: all).")
@click.option("--export", "export_to", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Then copy the cache to DIR/<sources digest> with its manifest (what a wheel ships).")
def warm(systems: tuple[str, ...], export_to: Path | None) -> None:
    """Compile the rating kernels into numba's cache (once per install and machine).

    Progress goes to stderr, one line per system; with a warm cache it only loads the kernels."""
    from stream.runtime.compile_notice import cache_location, compile_notice
    from stream.service.worker import warm_shared, warm_system

    names = list(dict.fromkeys(systems)) or sorted(SPECS)
    t0 = time.perf_counter()
    with compile_notice(hint=""):
        warm_shared()
        warmed: set[str] = set()
        for i, name in enumerate(names, 1):
            t = time.perf_counter()
            warm_system(name, {}, warmed)
            click.echo(f"mmr warm: [{i}/{len(names)}] {name}: {time.perf_counter() - t:.1f} s", err=True)
    click.echo(f"mmr warm: {len(names)} systems ready in {time.perf_counter() - t0:.1f} s; "
               f"kernels cached in {cache_location()}", err=True)
    if export_to is not None:
        from stream.runtime import locator as _numba_locator

        try:
            click.echo(f"mmr warm: exported to {_numba_locator.export(export_to)}", err=True)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
