"""The errors of mmr-stream: one base, three kinds, told apart by what fixes them (a bad input is
dead-lettered or named by file and line; a failure of infrastructure is retried when transient,
else reported once; a bad setting needs the operator). Each error class of the package derives from
one of these, keeping its built-in base (``ValueError``).
"""

from __future__ import annotations


class MmrError(Exception):
    """The base of every error this package raises on purpose."""


class InputError(MmrError):
    """Bad input: the event, line or request is at fault, and retrying does not help."""


class InfrastructureError(MmrError):
    """A component outside the process (Redis, the broker, the network, a port) failed or refused."""


class ConfigurationError(MmrError):
    """A setting or parameter that cannot be used: the operator must change it."""


class ConnectError(InfrastructureError):
    """A component could not be reached, or refused the connection: one line naming the component, its
    address (secrets masked) and the cause, and whether waiting may help (``retry``: not for a wrong
    password, a TLS or SASL mismatch)."""

    def __init__(self, component: str, address: str, cause: str, detail: str = "", *, retry: bool) -> None:
        self.component = component
        self.address = address
        self.cause = cause
        self.detail = detail
        self.retry = retry
        super().__init__(f"{component} at {address}: {cause}" + (f" ({detail})" if detail else ""))
