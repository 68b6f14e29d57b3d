"""``mmr --help`` and the help of every subcommand (and of every benchmark) run and say what they do."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from stream.cli import COMMANDS, main
from stream.tools.bench import BENCHES


@pytest.mark.parametrize("args", [[], *([name] for name in sorted(COMMANDS)),
                                  *(["bench", name] for name in ["all", *BENCHES])],
                         ids=lambda args: " ".join(args) or "mmr")
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_command_has_a_help(args: list[str], flag: str) -> None:
    res = CliRunner().invoke(main, [*args, flag])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("Usage: ") and "Options:" in res.output
    if args:
        assert f"{args[-1]} [OPTIONS]" in res.output
