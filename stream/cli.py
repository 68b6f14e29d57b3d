"""``mmr``: the command line. Each subcommand is imported only when invoked, so ``mmr --help`` stays
instant (no numba, no Faust). A failure of Redis or the broker ends a command with one line on
stderr naming the component, its address (secrets masked) and the cause, exit status 1; the
traceback only with ``mmr --debug`` or ``MMR_LOG_LEVEL=debug``."""

from __future__ import annotations

import atexit
import functools
import gc
import importlib
import sys
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
    "fit": ("stream.tools.fit", "fit", "Fit a pool's parameters on its own history and write its pools file."),
    "report": ("stream.tools.report", "report", "Write a Markdown/HTML report with plots comparing systems."),
    "bench": ("stream.tools.bench.command", "bench", "Benchmarks: measured side by side in one run."),
    "warm": ("stream.tools.warm", "warm", "Compile the rating kernels into numba's cache (after install)."),
    "worker": ("stream.service.worker", "worker", "Run the streaming service (Faust worker)."),
    "export": ("stream.service.export", "export", "Write the ratings held in Redis as JSONL."),
    "rebuild": ("stream.service.rebuild", "rebuild", "Rate the input topics into Redis again (Redis lost writes)."),
}


#: subcommand -> what it cannot run without: checked before its module is imported (the worker's imports
#: take seconds), so that a wrong password or an unreachable broker ends it at once, in one line
NEEDS: dict[str, tuple[str, ...]] = {"worker": ("redis", "kafka"), "export": ("redis",), "rebuild": ("redis", "kafka")}


@functools.cache
def no_collection_at_exit() -> None:
    """Every object alive at exit frozen (``gc.freeze``, an ``atexit`` handler), once per process.

    Why: as the interpreter exits it collects cycles once more over every object still alive
    (numba's and numpy's registries, a replay's results, ...), a noticeable part of a command's
    wall time, to free memory the end of the process frees anyway. Frozen objects are left out of
    that collection; they are still released as the modules are cleared."""
    atexit.register(gc.freeze)


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

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None,
                                                                             list[str]]:
        """The subcommand; one that needs Redis or the broker (``NEEDS``) first checks that they answer and
        accept the credentials (``stream.service.preflight``), unless only its help is asked for."""
        needs = NEEDS.get(args[0], ()) if args else ()
        if needs and not ctx.resilient_parsing and not {"-h", "--help"} & set(args[1:]):
            from stream.service import preflight
            from stream.service.config import from_env

            preflight.check(from_env(), redis="redis" in needs, kafka="kafka" in needs)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][2]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the subcommand; bad parameters and settings end it as usage errors (exit 2), a failure of
        Redis or the broker as one line (exit 1)."""
        from stream import redact
        from stream.service.config import warn_unknown

        no_collection_at_exit()
        warn_unknown()
        s = _settings()
        debug = bool(ctx.params.get("debug")) or (s is not None and s.log_level == "debug")
        if s is not None:
            redact.install(s.secrets())
        try:
            return super().invoke(ctx)
        except ParamError as exc:
            raise click.BadParameter(exc.reason, param_hint=exc.source) from None
        except SettingError as exc:
            raise ConfigurationError(str(exc)) from None
        except Exception as exc:
            line = None if debug else infrastructure_line(exc)
            if line is None:
                raise
            click.echo(f"mmr: {line}", err=True)
            sys.exit(1)


def _settings() -> Any:
    """The service's settings from the environment, or None where they do not parse (the command reports
    that itself if it needs them)."""
    from stream.service.config import from_env

    try:
        return from_env()
    except (SettingError, ParamError):
        return None


def infrastructure_line(exc: BaseException) -> str | None:
    """The one line that reports ``exc`` when it is a failure of Redis or the broker (None: it is not):
    the package's own errors say what they mean, redis-py's and aiokafka's are named by component."""
    from stream import redact

    if isinstance(exc, errors.InfrastructureError):
        return redact.mask(str(exc))
    module = type(exc).__module__.split(".")[0]
    s = _settings()
    if module == "redis" and s is not None:
        from stream.state.redis_client import connect_error

        err = connect_error(exc, s.redis_url)
        return None if err is None else redact.mask(str(err))
    if module == "aiokafka" and s is not None:
        from stream.service.preflight import kafka_error

        return redact.mask(str(kafka_error(exc, s)))
    return None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(version=__version__, prog_name="mmr")
@click.option("--debug", is_flag=True, help="Show the traceback of a failure of Redis or the broker "
              "(also MMR_LOG_LEVEL=debug).")
def main(debug: bool) -> None:
    """mmr-stream: streaming skill ratings (Elo-MMR, Cowan, baselines) on Kafka + Redis."""


if __name__ == "__main__":
    main()
