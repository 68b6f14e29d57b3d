"""``mmr report``: compare systems on one history in a Markdown (or HTML) page with PNG plots.

Why a separate command from ``mmr eval``: the report needs per-prediction traces and rating
trajectories, which ``eval`` does not keep because they cost memory on big histories. Contents:
the ``mmr eval`` metrics with runtimes, calibration curves, log loss by rating difference (as in
Cowan's Fig. 5.1), the top players' trajectories and the runtime per system (matplotlib's Agg
backend: files only, no display).
"""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any

import click
import numpy as np

from stream.events.inputs import CsvMapping
from stream.ratings import make_system
from stream.scoring import calibration_table, log_loss
from stream.tools.common import csv_columns_option, exit_on_bad_input
from stream.tools.evaluate import Trace, evaluate_events, load_events

#: what ``mmr report`` says where matplotlib is missing (pyproject.toml, extra ``report``)
REPORT_EXTRA = "mmr report draws its plots with matplotlib, which is not installed: pip install 'mmr-stream[report]'"


def parse_system_params(pairs: tuple[str, ...], systems: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """``SYSTEM:KEY=VALUE`` (or ``KEY=VALUE`` for every system) → {system: {key: value}}."""
    out: dict[str, dict[str, str]] = {s: {} for s in systems}
    for pair in pairs:
        head, sep, value = pair.partition("=")
        if not sep:
            raise click.BadParameter(f"expected [SYSTEM:]KEY=VALUE, got {pair!r}", param_hint="--param")
        system, colon, key = head.rpartition(":")
        targets = [system] if colon else list(systems)
        for s in targets:
            if s not in out:
                raise click.BadParameter(f"{s!r} is not one of the --system values", param_hint="--param")
            out[s][key.strip()] = value
    return out


def _save(fig: Any, path: Path) -> None:
    """Lay ``fig`` out, write it to ``path`` and free it (pyplot keeps every open figure)."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _finish(fig: Any, ax: Any, path: Path, title: str, ylabel: str, xlabel: str | None = None) -> None:
    """The titles and legend of a one-plot figure, then ``_save``."""
    if xlabel is not None:
        ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8)
    _save(fig, path)


def _plot_calibration(traces: dict[str, Trace], path: Path, bins: int) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="perfect")
    for name, tr in traces.items():
        tab = [c for c in calibration_table(tr.p, tr.s, bins) if c.n]
        ax.plot([c.mean_p for c in tab], [c.mean_s for c in tab], marker="o", ms=3, label=name)
    _finish(fig, ax, path, "Calibration", "observed mean score", "predicted score of the first player")


def _plot_logloss_by_diff(traces: dict[str, Trace], path: Path, width: float = 50.0) -> None:
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for name, tr in traces.items():
        d = np.abs(np.asarray(tr.diff))
        ll = log_loss(tr.p, tr.s)
        idx = np.minimum((d // width).astype(int), 15)
        xs, ys = [], []
        for b in range(16):
            m = idx == b
            if m.sum() >= 20:
                xs.append((b + 0.5) * width)
                ys.append(float(ll[m].mean()))
        ax.plot(xs, ys, marker="o", ms=3, label=name)
    _finish(fig, ax, path, "Log loss by rating difference", "mean log loss",
            f"|μ difference| before the event, Elo scale (bins of {width:.0f}; last bin open)")


def _plot_trajectories(traces: dict[str, Trace], top: list[str], path: Path) -> None:
    import matplotlib.pyplot as plt

    n = len(traces)
    fig, axes = plt.subplots(n, 1, figsize=(7, 2.6 * n), squeeze=False, sharex=True)
    for ax, (name, tr) in zip(axes[:, 0], traces.items(), strict=True):
        for player in top:
            pts = tr.trajectories.get(player, [])
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], lw=1, label=player)
        ax.set_ylabel(f"{name}\nrating")
    axes[0, 0].legend(fontsize=7, ncol=min(len(top), 5))
    axes[-1, 0].set_xlabel("event index")
    fig.suptitle("Rating trajectories of the top players")
    _save(fig, path)


def _plot_runtime(results: dict[str, dict[str, Any]], path: Path) -> None:
    import matplotlib.pyplot as plt

    names = list(results)
    fig, ax = plt.subplots(figsize=(6, 3.2))
    x = np.arange(len(names))
    ax.bar(x - 0.2, [results[n]["runtime_s"] for n in names], 0.4, label="replay + scoring")
    ax.bar(x + 0.2, [results[n]["update_s"] for n in names], 0.4, label="rating updates only")
    ax.set_xticks(x, names)
    _finish(fig, ax, path, "Runtime per system", "seconds")


METRICS = [("pair_inversion", "pair inversion %"), ("rank_deviation", "rank deviation %"),
           ("log_loss", "log loss"), ("brier", "Brier"), ("accuracy", "accuracy"),
           ("runtime_s", "runtime s"), ("update_s", "updates s")]


def _table(results: dict[str, dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    cols = [(k, label) for k, label in METRICS if any(k in r for r in results.values())]
    header = ["system", "events", *[label for _, label in cols]]
    rows = []
    for name, r in results.items():
        cells = [name, str(r["n_events"])]
        for k, _ in cols:
            v = r.get(k)
            cells.append("–" if v is None else f"{v:.4f}" if k in ("log_loss", "brier", "accuracy") else f"{v:.2f}")
        rows.append(cells)
    return header, rows


def render_markdown(title: str, command: str, header: list[str], rows: list[list[str]], images: list[str]) -> str:
    lines = [f"# {title}", "", f"Command: `{command}`", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    lines.append("")
    lines += [f"![{Path(i).stem}]({i})\n" for i in images]
    return "\n".join(lines)


def render_html(title: str, command: str, header: list[str], rows: list[list[str]], images: list[str]) -> str:
    esc = html.escape
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    imgs = "".join(f'<p><img src="{esc(i)}" alt="{esc(Path(i).stem)}"></p>' for i in images)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:auto}td,th{padding:2px 8px;"
            "border-bottom:1px solid #ddd;text-align:right}</style></head><body>"
            f"<h1>{esc(title)}</h1><p>Command: <code>{esc(command)}</code></p>"
            f"<table><tr>{head}</tr>{body}</table>{imgs}</body></html>")


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--system", "systems", multiple=True, required=True, help="System to compare (repeatable).")
@click.option("--param", "params", multiple=True, metavar="[SYSTEM:]KEY=VALUE",
              help="Parameter for one system (or all systems without the prefix).")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default="build/report", show_default=True,
              help="Directory for the report and its PNGs.")
@click.option("--format", "fmt", type=click.Choice(["md", "html"]), default="md", show_default=True)
@click.option("--title", default="Rating systems compared", show_default=True)
@click.option("--warmup", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.1, show_default=True)
@click.option("--min-history", type=click.IntRange(0), default=5, show_default=True)
@click.option("--top", type=click.IntRange(0), default=5, show_default=True, help="Players in the trajectory plot.")
@click.option("--bins", type=click.IntRange(1), default=10, show_default=True, help="Calibration bins.")
@click.option("--pool", default=None, help="Pool for contest/CSV input.")
@csv_columns_option
def report(inputs: tuple[str, ...], systems: tuple[str, ...], params: tuple[str, ...], out_dir: str, fmt: str,
           title: str, warmup: float, min_history: int, top: int, bins: int, pool: str | None,
           mapping: CsvMapping) -> None:
    """Evaluate each --system on INPUT and write a report with plots to --out.

    Needs matplotlib: pip install 'mmr-stream[report]'."""
    try:
        import matplotlib
    except ImportError:  # an optional dependency: say which extra brings it, no traceback
        raise click.ClickException(REPORT_EXTRA) from None

    matplotlib.use("Agg")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    per_system = parse_system_params(params, systems)
    results: dict[str, dict[str, Any]] = {}
    traces: dict[str, Trace] = {}
    finals: dict[str, dict[str, float]] = {}
    with exit_on_bad_input():
        events = load_events(inputs, pool, mapping)
        for name in systems:
            system = make_system(name, per_system[name])
            res, ev = evaluate_events(system, events, warmup, min_history, trace=True, trajectories=top > 0,
                                      bins=bins)
            res["params"] = system.params.as_dict()
            results[name] = res
            assert ev.trace is not None
            traces[name] = ev.trace
            finals[name] = {p: pts[-1][1] for p, pts in ev.trace.trajectories.items()}
            click.echo(f"{name}: {json.dumps({k: v for k, v in res.items() if k != 'calibration'}, default=float)}",
                       err=True)
    images: list[str] = []
    two_player = {n: t for n, t in traces.items() if t.p}
    if two_player:
        _plot_calibration(two_player, out / "calibration.png", bins)
        _plot_logloss_by_diff(two_player, out / "logloss_by_diff.png")
        images += ["calibration.png", "logloss_by_diff.png"]
    if top and systems and finals[systems[0]]:
        first = finals[systems[0]]
        best = sorted(first, key=lambda p: (-first[p], p))[:top]
        _plot_trajectories(traces, best, out / "trajectories.png")
        images.append("trajectories.png")
    _plot_runtime(results, out / "runtime.png")
    images.append("runtime.png")
    header, rows = _table(results)
    command = "mmr report " + " ".join([*inputs, *(f"--system {s}" for s in systems),
                                        *(f"--param {p}" for p in params)])
    render = render_markdown if fmt == "md" else render_html
    target = out / ("report.md" if fmt == "md" else "report.html")
    target.write_text(render(title, command, header, rows, images), encoding="utf-8")
    (out / "results.json").write_text(json.dumps(results, default=float, indent=1), encoding="utf-8")
    click.echo(f"wrote {target} ({len(images)} plots)", err=True)
