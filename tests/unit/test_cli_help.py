"""``mmr --help`` and the help of every subcommand (and of every benchmark) run and say what they do."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from stream.cli import COMMANDS, main
from stream.tools.bench.command import BENCHES


@pytest.mark.parametrize("args", [[], *([name] for name in sorted(COMMANDS)),
                                  *(["bench", name] for name in ["all", *BENCHES])],
                         ids=lambda args: " ".join(args) or "mmr")
def test_every_command_has_a_help(args: list[str]) -> None:
    res = CliRunner().invoke(main, [*args, "--help"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Usage: ") and "Options:" in res.output
    if args:
        assert f"{args[-1]} [OPTIONS]" in res.output


@pytest.mark.parametrize("args", [[], ["worker"], ["bench"], ["bench", "cowan"]], ids=lambda a: " ".join(a) or "mmr")
def test_h_is_help_at_every_level(args: list[str]) -> None:
    """``-h`` (the group's ``help_option_names``, inherited by every subcommand), in a process of its own:
    click keeps a command's help option once made, so an in-process test that invoked a subcommand
    directly would decide it for the others."""
    res = subprocess.run([sys.executable, "-m", "stream.cli", *args, "-h"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: ") and "Options:" in res.stdout


def test_a_command_leaves_objects_alive_at_exit_out_of_the_last_collection() -> None:
    """A subcommand's process freezes what is alive at exit (``no_collection_at_exit``): the
    interpreter's last collection is skipped, and the command's output and exit status are as before."""
    code = ("import atexit, gc, sys; from stream.cli import main; "
            "atexit.register(lambda: print('frozen', gc.get_freeze_count() > 0)); main(['synth', '--help'])")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith("Usage: ") and res.stdout.rstrip().endswith("frozen True")
