"""Secrets never printed: URLs and log records masked (``stream.redact``); ``*_FILE`` settings (``stream.config``)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from stream import redact
from stream.config import SettingError
from stream.redact import MASK, mask_url, url_secrets
from stream.service.config import from_env, known_names


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://:pw@host:6379/0", f"redis://:{MASK}@host:6379/0"),
    ("rediss://user:pw@host/0", f"rediss://user:{MASK}@host/0"),
    ("redis://host:6379/0?password=pw&db=1", f"redis://host:6379/0?password={MASK}&db=1"),
    ("redis://u:pw@[::1]:7000/0?Token=t", f"redis://u:{MASK}@[::1]:7000/0?Token={MASK}"),
    ("redis://host:6379/0", "redis://host:6379/0"),
    ("redis://user@host/0", "redis://user@host/0"),
])
def test_a_url_is_shown_without_its_secrets(url: str, shown: str) -> None:
    assert mask_url(url) == shown
    assert all(s not in mask_url(url) for s in url_secrets(url))


def test_the_secrets_of_a_url() -> None:
    assert url_secrets("redis://u:p1@h/0?password=p2&db=3") == ["p1", "p2"]
    assert url_secrets("redis://h/0") == []


def test_settings_show_no_secret_and_list_every_one() -> None:
    s = from_env({"REDIS_URL": "redis://:urlpw@h/0?password=querypw", "MMR_REDIS_PASSWORD": "setpw",
                  "MMR_KAFKA_SASL_PASSWORD": "saslpw"})
    assert sorted(s.secrets()) == ["querypw", "saslpw", "setpw", "urlpw"]
    assert not any(x in repr(s) for x in s.secrets())


def test_log_records_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    redact.install(["hunter2-secret"])
    log = logging.getLogger("test.redact")
    with caplog.at_level(logging.INFO):
        log.info("connecting with %s", "hunter2-secret")
        try:
            raise ValueError("refused hunter2-secret")
        except ValueError:
            log.exception("failed")
    assert "hunter2-secret" not in caplog.text and MASK in caplog.text
    assert all("hunter2-secret" not in (r.exc_text or "") for r in caplog.records)


def test_a_secret_setting_may_be_read_from_a_file(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("from-file\n")
    (tmp_path / "url").write_text("redis://:u@h:1/2\n")
    s = from_env({"MMR_REDIS_PASSWORD_FILE": str(tmp_path / "pw"), "REDIS_URL_FILE": str(tmp_path / "url"),
                  "MMR_KAFKA_SASL_PASSWORD_FILE": str(tmp_path / "pw")})
    assert s.redis_password.get_secret_value() == "from-file" == s.sasl_password.get_secret_value()
    assert s.redis_url == "redis://:u@h:1/2"
    assert {"REDIS_URL_FILE", "MMR_REDIS_PASSWORD_FILE", "MMR_KAFKA_SASL_PASSWORD_FILE"} <= known_names()
    with pytest.raises(SettingError, match="MMR_REDIS_PASSWORD and MMR_REDIS_PASSWORD_FILE are both set"):
        from_env({"MMR_REDIS_PASSWORD": "x", "MMR_REDIS_PASSWORD_FILE": str(tmp_path / "pw")})
    with pytest.raises(SettingError, match=r"REDIS_URL_FILE=.*cannot read the file"):
        from_env({"REDIS_URL_FILE": str(tmp_path / "missing")})
    assert "MMR_TOPIC_MATCHES_FILE" not in known_names()  # only secrets come from files
