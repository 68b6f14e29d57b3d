"""Parameters of a rating system as ``KEY=VALUE`` text: one parser for ``--param`` options and
``MMR_PARAMS``, so both accept the same text. Values stay strings; each system parses its own.
"""

from __future__ import annotations

from collections.abc import Iterable

from stream.errors import ConfigurationError


class ParamError(ConfigurationError, ValueError):
    """A parameter that is not ``KEY=VALUE``; ``source`` names where it came from."""

    def __init__(self, source: str, reason: str) -> None:
        self.source = source
        self.reason = reason
        super().__init__(f"{source}: {reason}")


def parse_params(pairs: Iterable[str], source: str = "--param") -> dict[str, str]:
    """``KEY=VALUE`` pairs → ``{KEY: VALUE}`` (both stripped; a later KEY wins)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ParamError(source, f"expected KEY=VALUE, got {pair!r}")
        out[key.strip()] = value.strip()
    return out


def parse_param_list(text: str, source: str = "MMR_PARAMS") -> dict[str, str]:
    """``KEY=VALUE,KEY=VALUE`` (the form of ``MMR_PARAMS``; empty items are skipped)."""
    return parse_params((item for item in text.split(",") if item.strip()), source)
