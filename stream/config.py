"""The environment grammar of mmr-stream (docs/operator.md, "Configuration"), and the engine's switches.

Every environment variable the package reads is a field of a frozen dataclass (the service's
``Settings`` or ``EngineSettings`` below) declared with ``setting(default, "NAME")`` and parsed by
``load``: one grammar, and a value that does not parse raises ``SettingError`` naming the variable (a
typo never reads as false). A ``Secret`` (never in a ``repr``) or a ``file=True`` setting may be read
from the file ``NAME_FILE`` names, as Docker and Kubernetes mount secrets. The engine's switches live
here, below every package, because their modules read them before any settings exist.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import cache
from typing import Any, Literal, TypeVar, get_args, get_origin, get_type_hints

from stream.errors import ConfigurationError

T = TypeVar("T")

#: dataclass field metadata key naming the environment variable of a setting
ENV = "env"
#: ... and the key of a setting that may be read from the file ``<variable>_FILE`` names
FILE = "file"
#: the suffix of the variable naming the file a secret is read from
FILE_SUFFIX = "_FILE"

BOOLEAN_WORDS = {"1": True, "true": True, "yes": True, "on": True,
                 "0": False, "false": False, "no": False, "off": False}


class SettingError(ConfigurationError, ValueError):
    """A setting whose value cannot be used; the message names the variable."""


class Secret:
    """A password or token: compared and used like its value, shown as ``**********``."""

    __slots__ = ("_value",)

    def __init__(self, value: str = "") -> None:
        self._value = value

    def get_secret_value(self) -> str:
        return self._value

    def __bool__(self) -> bool:
        return bool(self._value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Secret) and other._value == self._value

    def __hash__(self) -> int:
        return hash(self._value)

    def __repr__(self) -> str:
        return "Secret('**********')" if self._value else "Secret('')"

    def __str__(self) -> str:
        return "**********" if self._value else ""


def setting(default: T, env: str, *, file: bool = False) -> T:
    """A dataclass field read from the environment variable ``env`` by ``load`` (``file``: or from the
    file ``env_FILE`` names, as every ``Secret`` setting may be)."""
    return field(default=default, metadata={ENV: env, FILE: file})  # type: ignore[no-any-return]


#: the resolved annotations of a settings class (resolved once: ``check_fields`` runs at every construction)
_hints: Callable[[type], dict[str, Any]] = cache(get_type_hints)


def env_names(cls: type) -> dict[str, str]:
    """``{field name: variable}`` of every setting of a settings class."""
    return {f.name: name for f in fields(cls) if (name := f.metadata.get(ENV)) is not None}


def file_names(cls: type) -> dict[str, str]:
    """``{field name: NAME_FILE}`` of the settings of ``cls`` that may be read from a file (secrets)."""
    hints = _hints(cls)
    return {f.name: name + FILE_SUFFIX for f in fields(cls) if (name := f.metadata.get(ENV)) is not None
            and (f.metadata.get(FILE) or hints[f.name] is Secret)}


def _read_file(variable: str, path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or exc
        raise SettingError(f"{variable}={path!r}: cannot read the file ({why})") from None


def parse(name: str, raw: str, hint: Any) -> Any:
    """The value of variable ``name`` (its text ``raw``) as the type ``hint``."""
    text = raw.strip()
    if hint == bool | None:  # a switch that may be left to detection
        return None if text.lower() == "auto" else parse(name, raw, bool)
    if hint is bool:
        try:
            return BOOLEAN_WORDS[text.lower()]
        except KeyError:
            raise SettingError(f"{name}={raw!r}: expected one of 1/0, true/false, yes/no, on/off") from None
    if hint in (int, float):
        try:
            return hint(text)
        except ValueError:
            raise SettingError(f"{name}={raw!r}: expected {'an integer' if hint is int else 'a number'}") from None
    if hint is Secret:
        return Secret(raw)
    if get_origin(hint) is Literal:
        for choice in get_args(hint):
            if choice.lower() == text.lower():
                return choice
        raise SettingError(f"{name}={raw!r}: expected one of {', '.join(get_args(hint))}")
    if hint is str:
        return raw
    raise TypeError(f"{name}: no parser for {hint!r}")


def load(cls: type, env: Mapping[str, str]) -> dict[str, Any]:
    """Keyword arguments of ``cls`` for the variables of its settings that ``env`` sets."""
    hints = _hints(cls)
    from_files = file_names(cls)
    out: dict[str, Any] = {}
    for attr, name in env_names(cls).items():
        raw = env.get(name)
        file_var = from_files.get(attr)
        path = env.get(file_var, "").strip() if file_var else ""
        if path and file_var:
            if raw:
                raise SettingError(f"{name} and {file_var} are both set: set one of them")
            raw = _read_file(file_var, path)
            name = file_var
        if raw:
            out[attr] = parse(name, raw, hints[attr])
    return out


def check_fields(obj: Any) -> None:
    """Types and choices of a settings object however it was built, from ``__post_init__``: a ``str`` for a
    ``Secret`` becomes one, an ``int`` for a ``float`` a float; anything else wrong is refused by name."""
    hints = _hints(type(obj))
    for f in fields(obj):
        hint, value = hints[f.name], getattr(obj, f.name)
        label = f.metadata.get(ENV) or f.name
        origin = get_origin(hint)
        if hint == bool | None:
            if value is not None and not isinstance(value, bool):
                raise SettingError(f"{label}={value!r}: expected a boolean or auto")
        elif origin is Literal:
            if value not in get_args(hint):
                raise SettingError(f"{label}={value!r}: expected one of {', '.join(get_args(hint))}")
        elif hint is Secret and isinstance(value, str):
            object.__setattr__(obj, f.name, Secret(value))
        elif hint is float and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(obj, f.name, float(value))
        elif isinstance(hint, type) and (not isinstance(value, hint) or (hint is int and isinstance(value, bool))):
            raise SettingError(f"{label}={value!r}: expected {hint.__name__}")
        elif origin is not None and isinstance(origin, type) and not isinstance(value, origin):
            raise SettingError(f"{label}={value!r}: expected {origin.__name__}")


@dataclass(frozen=True)
class EngineSettings:
    """Switches of the rating engine, read where they are used (see the module docstring)."""

    #: keep numba's compiled kernels in a directory per version of the sources
    #: (``stream.runtime.numba_cache``); off: numba's own choice, beside each module
    numba_cache: bool = setting(True, "MMR_NUMBA_CACHE")
    #: Elo-MMR rounds with fewer players run their kernels on one thread, and so do the logistic sums of
    #: Elo and Codeforces rounds (``PARALLEL_MIN_PLAYERS`` of ``elo_mmr.system`` and ``baselines.kernels``).
    #: Below a few thousand players a round's parallel phases are too short to pay for waking the
    #: threads when the other core is busy; above, the balanced loops (``stream.runtime.balanced``)
    #: lose nothing then and gain when it is free (BENCHMARKS.md, "Elo-MMR")
    elo_parallel_min: int = setting(3_000, "MMR_ELO_PARALLEL_MIN")
    #: folder of the public data sets (contest histories) that evaluations and benchmarks read
    data_dir: str = setting("", "MMR_DATA_DIR")

    def __post_init__(self) -> None:
        check_fields(self)
        if self.elo_parallel_min < 0:
            raise SettingError(f"MMR_ELO_PARALLEL_MIN={self.elo_parallel_min}: expected a count of players ≥ 0")


def engine_settings(env: Mapping[str, str] | None = None) -> EngineSettings:
    return EngineSettings(**load(EngineSettings, os.environ if env is None else env))
