"""Secrets kept out of messages and logs.

A password can reach the service in a URL's user part or query (``redis://host/0?password=pw``,
which redis-py honours), a setting or a file a ``*_FILE`` setting names. ``mask_url`` hides the
first two wherever a URL is printed; settings hold the others as ``stream.config.Secret``. A message
can still carry a secret a library put there (an exception quoting its URL): ``install`` masks the
secrets the process knows in every log record, its arguments and its traceback.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

MASK = "**********"
#: query parameters of a URL that carry a secret (redis-py reads ``password``; the others are common)
SECRET_PARAMS = frozenset({"password", "pass", "passwd", "pwd", "secret", "token", "sasl_password", "auth"})


def mask_url(url: str) -> str:
    """``url`` with the password of its user part and the values of its secret query parameters
    replaced by ``MASK`` (a URL that does not parse is masked whole)."""
    try:
        parts = urlsplit(url)
        password = parts.password
        port = parts.port
    except ValueError:
        return MASK
    netloc = parts.netloc
    if password is not None or (parts.username is not None and "@" in netloc):
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        user = parts.username or ""
        netloc = f"{user}:{MASK}@{host}" if password is not None else f"{user}@{host}"
        if port is not None:
            netloc += f":{port}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        if any(k.lower() in SECRET_PARAMS for k, _ in pairs):
            query = urlencode([(k, MASK if k.lower() in SECRET_PARAMS else v) for k, v in pairs], safe="*")
    return urlunsplit(parts._replace(netloc=netloc, query=query))


def url_secrets(url: str) -> list[str]:
    """The secrets a URL carries: its password and the values of its secret query parameters."""
    try:
        parts = urlsplit(url)
        out = [parts.password] if parts.password else []
    except ValueError:
        return [url]
    out += [v for k, v in parse_qsl(parts.query, keep_blank_values=True) if k.lower() in SECRET_PARAMS and v]
    return out


_secrets: set[str] = set()


def mask(text: str, secrets: Iterable[str] | None = None) -> str:
    """``text`` with every occurrence of a secret (``secrets``, else those ``install`` was given) replaced."""
    for s in sorted(_secrets if secrets is None else set(secrets), key=len, reverse=True):
        if s:
            text = text.replace(s, MASK)
    return text


def install(secrets: Iterable[str]) -> None:
    """From now on, mask ``secrets`` (added to those given before) in every log record this process
    makes: the record factory formats a record's message and traceback once and masks them."""
    new = {s for s in secrets if s and len(s) >= 3}  # a one-letter "secret" would mask half the log
    if not new - _secrets:
        return
    first = not _secrets
    _secrets.update(new)
    if first:
        previous = logging.getLogRecordFactory()

        def factory(*args: object, **kwargs: object) -> logging.LogRecord:
            record = previous(*args, **kwargs)  # type: ignore[arg-type]
            try:
                message = record.getMessage()
            except Exception:  # a record whose arguments do not fit its message: left to the handler
                return record
            masked = mask(message)
            if masked != message:
                record.msg, record.args = masked, ()
            if record.exc_info and not record.exc_text:
                record.exc_text = mask(logging.Formatter().formatException(record.exc_info))
            return record

        logging.setLogRecordFactory(factory)
