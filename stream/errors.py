"""The errors of mmr-stream: one base, three kinds, told apart by what fixes them.

* ``InputError``: the input is at fault (an event, a file's line, a request's parameter): it is
  dead-lettered, or the command names the file and line; retrying changes nothing.
* ``InfrastructureError``: Redis, the broker or the network failed. Transient ones are retried with
  backoff; the others (a wrong password, a TLS or SASL mismatch) are reported once, not retried.
* ``ConfigurationError``: a setting or parameter cannot be used: the operator must change it.

Each error class of the package derives from one of these, keeping its built-in base (``ValueError``).
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
    address (secrets masked) and the cause (``str``), and whether waiting may help (``retry``: an
    unreachable server may come back; a wrong password, a TLS or SASL mismatch does not)."""

    def __init__(self, component: str, address: str, cause: str, detail: str = "", *, retry: bool) -> None:
        self.component = component
        self.address = address
        self.cause = cause
        self.detail = detail
        self.retry = retry
        super().__init__(f"{component} at {address}: {cause}" + (f" ({detail})" if detail else ""))
