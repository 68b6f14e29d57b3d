"""One error base: every error class of the package is an input, infrastructure or configuration error."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import stream
from stream.errors import ConfigurationError, ConnectError, InfrastructureError, InputError, MmrError

ROOT = Path(stream.__file__).parent
KINDS = (InputError, InfrastructureError, ConfigurationError)


def _error_classes() -> list[tuple[str, str]]:
    """(module, class) of every class under stream/ derived from a class named like an exception
    (``...Error``, ``...Exception``, or one of the package's own error classes): imported and checked."""
    ends = ("Error", "Exception", "Conflict", "Unavailable", "Restarted", "Refused", "Taken", "InvalidEvent")
    out = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        for node in ast.parse(path.read_text()).body:
            bases = [b.attr if isinstance(b, ast.Attribute) else getattr(b, "id", "") for b in
                     getattr(node, "bases", [])]
            if isinstance(node, ast.ClassDef) and any(b.endswith(ends) for b in bases):
                out.append((module, node.name))
    return out


def test_every_error_class_has_one_of_the_three_kinds() -> None:
    found = _error_classes()
    assert len(found) >= 15
    wrong = []
    for module, name in found:
        cls = getattr(importlib.import_module(module), name)
        if module != "stream.errors" and issubclass(cls, BaseException) and not issubclass(cls, KINDS):
            wrong.append(f"{module}.{name}")
    assert wrong == []


def test_the_built_in_bases_are_kept() -> None:
    from stream.config import SettingError
    from stream.events.check import InvalidEvent
    from stream.ratings.base import RatingError
    from stream.state.store_errors import Conflict

    assert issubclass(SettingError, ValueError) and issubclass(InvalidEvent, ValueError)
    assert issubclass(RatingError, ValueError) and issubclass(Conflict, RuntimeError)
    assert all(issubclass(k, MmrError) for k in KINDS)


def test_a_connect_error_is_one_line_naming_component_address_and_cause() -> None:
    err = ConnectError("Redis", "redis://h:1/0", "unreachable", "Connection refused", retry=True)
    assert str(err) == "Redis at redis://h:1/0: unreachable (Connection refused)" and err.retry
    assert isinstance(err, InfrastructureError)


def test_refused_credentials_name_their_cause_with_the_url_masked() -> None:
    import redis.exceptions as rex

    from stream.state.redis_client import CredentialsRefused, StoreUnavailable, connect_error, infrastructure_errors

    url = "redis://:pw-in-the-url@h:1/0"
    # the texts redis-py gives them (a mapped reply's code, WRONGPASS, NOAUTH, NOPERM, left out)
    causes = {rex.AuthenticationError("invalid username-password pair or user is disabled."): "wrong password",
              rex.AuthenticationError("Authentication required."): "authentication required",
              rex.NoPermissionError("User mmr has no permissions to run the 'evalsha' command"): "ACL"}
    for exc, cause in causes.items():
        err = connect_error(exc, url)
        assert err is not None and not err.retry and cause in str(err) and "pw-in-the-url" not in str(err)
        assert str(err).startswith("Redis at redis://:**********@h:1/0: authentication")
        try:  # met by a running client: not an outage to wait through, but still never a bug of the input
            with infrastructure_errors():
                raise exc
        except CredentialsRefused as refused:
            assert isinstance(refused, StoreUnavailable) and refused.__cause__ is exc
