"""``mmr``: the command line. Thin: each subcommand lives in stream.tools / stream.service
and is imported only when invoked, so ``mmr --help`` stays instant (no numba, no Faust).
``mmr --version`` is ``stream.__version__``, the one source of the version: the wheel's metadata
(pyproject.toml, dynamic) and the HTTP API's OpenAPI document read it too."""

from __future__ import annotations

import importlib
from typing import Any

import click

from stream import __version__, errors
from stream.config import SettingError
from stream.params import ParamError
from stream.runtime import configure

#: subcommand -> ("module", "attribute"); the attribute is a click command
COMMANDS: dict[str, tuple[str, str, str]] = {
    "synth": ("stream.tools.synth", "synth", "Generate synthetic rounds or matches from the papers' models."),
    "teams-csv": ("stream.tools.teams_csv", "teams_csv", "Convert team results (CSV, a row per player) to events."),
    "replay": ("stream.tools.replay", "replay", "Replay a history embedded (final ratings) or into the service."),
    "eval": ("stream.tools.evaluate", "evaluate", "Score a rating system's predictions on a history."),
    "tune": ("stream.tools.tune", "tune", "Grid-search parameters on the first 10% and evaluate on the rest."),
    "report": ("stream.tools.report", "report", "Write a Markdown/HTML report with plots comparing systems."),
    "bench": ("stream.tools.bench.command", "bench", "Benchmarks: measured side by side in one run."),
    "warm": ("stream.tools.warm", "warm", "Compile the rating kernels into numba's cache (after install)."),
    "worker": ("stream.service.worker", "worker", "Run the streaming service (Faust worker)."),
    "export": ("stream.service.export", "export", "Write the ratings held in Redis as JSONL."),
    "rebuild": ("stream.service.rebuild", "rebuild", "Rate the input topics into Redis again (Redis lost writes)."),
}


class ConfigurationError(errors.ConfigurationError, click.ClickException):
    """A setting of the environment that cannot be used: a message, no traceback."""

    exit_code = 2


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr, _ = COMMANDS[name]
        configure()  # numba's cache and threads, before the command's module imports a kernel
        cmd: click.Command = getattr(importlib.import_module(module), attr)
        return cmd

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; bad parameters and settings end it as usage errors (exit 2)."""
        from stream.service.config import warn_unknown

        warn_unknown()
        try:
            return super().invoke(ctx)
        except ParamError as exc:
            raise click.BadParameter(exc.reason, param_hint=exc.source) from None
        except SettingError as exc:
            raise ConfigurationError(str(exc)) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="mmr")
def main() -> None:
    """mmr-stream: streaming skill ratings (Elo-MMR, Cowan, baselines) on Kafka + Redis."""


if __name__ == "__main__":
    main()
