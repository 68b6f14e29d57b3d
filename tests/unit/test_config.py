"""Configuration: the environment grammar, Settings, and the one place the package reads the environment."""

from __future__ import annotations

import ast
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from repo_paths import ROOT

from stream.cli import main
from stream.config import EngineSettings, Secret, SettingError, engine_settings
from stream.service.config import PoolConfig, Settings, from_env, known_names, warn_unknown


def test_from_env_defaults_and_overrides(tmp_path: Path) -> None:
    s = from_env({})
    assert (s.kafka_bootstrap, s.redis_url) == ("127.0.0.1:9092", "redis://127.0.0.1:6379/0")
    assert s.system == "elo-mmr" and s.system_for("any").system == "elo-mmr"
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.chess]\nsystem = "cowan"\nparams = { beta = 0.7 }\n')
    s = from_env({"KAFKA_BOOTSTRAP_SERVERS": "k:1,k:2", "MMR_SYSTEM": "elo", "MMR_PARAMS": "k=20",
                  "MMR_POOLS_FILE": str(pools), "MMR_TAKE_MAX": "10", "MMR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                  "MMR_KAFKA_SASL_USERNAME": "u", "MMR_KAFKA_SASL_PASSWORD": "p", "MMR_REDIS_PASSWORD": "rp"})
    assert s.take_max == 10 and s.system == "elo"
    assert s.system_for("chess") == PoolConfig("cowan", {"beta": 0.7})
    assert s.system_for("other") == PoolConfig("elo", {"k": "20"})
    kw = s.aiokafka_kwargs()
    assert kw["sasl_plain_username"] == "u" and kw["security_protocol"] == "SASL_PLAINTEXT"
    assert s.redis_kwargs() == {"password": "rp"}
    s2 = from_env({}).with_default_system("elo-mmx", {"rho": "0.5"})
    assert (s2.system, s2.default_params) == ("elo-mmx", {"rho": "0.5"})
    assert from_env({}).on_rating_bug == "halt"
    assert from_env({"MMR_ON_RATING_BUG": "dead-letter"}).on_rating_bug == "dead-letter"
    with pytest.raises(ValueError, match="MMR_ON_RATING_BUG='skip': expected one of halt, dead-letter"):
        from_env({"MMR_ON_RATING_BUG": "skip"})
    assert from_env({}).seen_max_ids == 0 and from_env({"MMR_SEEN_MAX_IDS": "5000"}).seen_max_ids == 5000
    assert from_env({}).gil_switch_ms == 1.0 and from_env({"MMR_GIL_SWITCH_MS": "0.5"}).gil_switch_ms == 0.5
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(ValueError, match=f"MMR_GIL_SWITCH_MS={bad}"):
            from_env({"MMR_GIL_SWITCH_MS": bad})
    with pytest.raises(ValueError, match="MMR_SEEN_MAX_IDS=-1"):
        from_env({"MMR_SEEN_MAX_IDS": "-1"})


@pytest.mark.parametrize("name", ["MMR_ROUNDS_SYSTEM", "MMR_MATCHES_SYSTEM"])
def test_a_system_by_event_kind_is_refused_with_the_way_to_set_it(name: str) -> None:
    """A pool's system never depends on the kind of its first event (docs/interface.md): the variables
    that chose one by kind are refused, naming MMR_SYSTEM and the pools file, not ignored."""
    with pytest.raises(SettingError, match=f"{name} is not read: .*MMR_SYSTEM.*MMR_POOLS_FILE"):
        from_env({name: "cowan"})
    assert from_env({name: ""}).system == "elo-mmr"


def test_the_worker_sets_the_gil_switch_interval() -> None:
    import sys

    from stream.service.worker import tune_gil

    before = sys.getswitchinterval()
    try:
        tune_gil(from_env({}).gil_switch_ms)
        assert sys.getswitchinterval() == 0.001
        tune_gil(0)  # 0: left as it is
        assert sys.getswitchinterval() == 0.001
    finally:
        sys.setswitchinterval(before)


def test_the_worker_hands_its_settings_to_the_store() -> None:
    """Building the app connects to nothing (redis-py connects lazily)."""
    from stream.service.app import create_app

    svc = create_app(from_env({"MMR_SEEN_MAX_IDS": "123", "MMR_KEY_PREFIX": "kp", "MMR_HTTP_PORT": "0"}))
    assert (svc.store.seen_max_ids, svc.store.prefix) == (123, "kp")
    # (its gauge of the applied-ids index: tests/integration/test_redis_store.py, on a real read)
    assert svc.metrics.registry.get_sample_value("mmr_applied_ids_index_bytes") == 0


@pytest.mark.parametrize(("word", "value"), [("1", True), ("true", True), ("Yes", True), ("ON", True), ("on", True),
                                             ("0", False), ("FALSE", False), ("no", False), ("off", False)])
def test_one_boolean_grammar_for_every_switch(word: str, value: bool) -> None:
    s = from_env({"MMR_REDIS_CLUSTER": word})
    assert s.redis_cluster is value
    assert engine_settings({"MMR_NUMBA_CACHE": word}).numba_cache is value


@pytest.mark.parametrize("word", ["2", "enabled", "nope", "tru"])
def test_a_boolean_that_is_no_word_of_the_grammar_is_refused(word: str) -> None:
    with pytest.raises(SettingError, match=f"MMR_NUMBA_CACHE='{word}': expected one of 1/0, true/false"):
        engine_settings({"MMR_NUMBA_CACHE": word})


def test_numbers_and_choices_are_checked_by_name() -> None:
    with pytest.raises(SettingError, match="MMR_TAKE_MAX='ten': expected an integer"):
        from_env({"MMR_TAKE_MAX": "ten"})
    with pytest.raises(SettingError, match="MMR_TAKE_WITHIN='soon': expected a number"):
        from_env({"MMR_TAKE_WITHIN": "soon"})
    with pytest.raises(SettingError, match="MMR_KAFKA_SECURITY_PROTOCOL='TLS': expected one of PLAINTEXT, SSL, "):
        from_env({"MMR_KAFKA_SECURITY_PROTOCOL": "TLS"})
    with pytest.raises(SettingError, match="MMR_LOG_LEVEL='loud'"):
        from_env({"MMR_LOG_LEVEL": "loud"})
    with pytest.raises(SettingError, match="MMR_HTTP_PORT=70000"):
        from_env({"MMR_HTTP_PORT": "70000"})
    with pytest.raises(SettingError, match="MMR_ELO_PARALLEL_MIN='many': expected an integer"):
        engine_settings({"MMR_ELO_PARALLEL_MIN": "many"})
    # choices are matched without regard to case and kept in their canonical spelling
    s = from_env({"MMR_KAFKA_SECURITY_PROTOCOL": "sasl_ssl", "MMR_LOG_LEVEL": "WARNING",
                  "MMR_ON_RATING_BUG": "Dead-Letter"})
    assert (s.security_protocol, s.log_level, s.on_rating_bug) == ("SASL_SSL", "warning", "dead-letter")
    assert from_env({"MMR_TAKE_MAX": ""}).take_max == Settings().take_max  # empty: not set


def test_the_http_server_listens_on_the_loopback_and_any_free_port_by_default() -> None:
    s = from_env({})
    assert (s.http_host, s.http_port) == ("127.0.0.1", 0)
    s = from_env({"MMR_HTTP_HOST": "0.0.0.0", "MMR_HTTP_PORT": "6066"})
    assert (s.http_host, s.http_port) == ("0.0.0.0", 6066)


def test_the_redis_client_names_say_whose_and_what_for_in_what_redis_accepts() -> None:
    assert from_env({"MMR_APP_ID": "ratings-eu"}).redis_client_name("reads") == "ratings-eu/reads"
    assert from_env({"MMR_APP_ID": "my app\u00e9"}).redis_client_name("health") == "my_app_/health"


def test_passwords_never_show_in_a_repr() -> None:
    s = from_env({"MMR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "MMR_KAFKA_SASL_USERNAME": "u",
                  "MMR_KAFKA_SASL_PASSWORD": "kafka-pw", "MMR_REDIS_PASSWORD": "redis-pw",
                  "REDIS_URL": "redis://user:url-pw@redis.example:6380/2"})
    shown = repr(s) + str(s)
    for secret in ("kafka-pw", "redis-pw", "url-pw"):
        assert secret not in shown
    assert "redis://user:**********@redis.example:6380/2" in shown
    assert s.aiokafka_kwargs()["sasl_plain_password"] == "kafka-pw"
    assert s.redis_kwargs()["password"] == "redis-pw"
    assert s.redis_url == "redis://user:url-pw@redis.example:6380/2"  # the client gets it whole
    assert Settings(sasl_password="p").sasl_password == Secret("p")  # type: ignore[arg-type]


def test_unknown_mmr_variables_are_named_in_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="stream.service.config"):
        s = from_env({"MMR_TAKEMAX": "10", "MMR_TAKE_WITHIN": "0.01", "HOME": "/root", "MMR_TEST_REDIS_DB": "3"})
    assert s.take_max == Settings().take_max
    assert [r.getMessage() for r in caplog.records] == [
        "MMR_TAKEMAX is not a setting of mmr-stream and is ignored; did you mean MMR_TAKE_MAX? (see docs/operator.md)"]
    assert warn_unknown({"MMR_NO_SUCH_THING": "1", "MMR_LOG_LEVEL": "info"}) == ["MMR_NO_SUCH_THING"]
    assert {"MMR_SYSTEM", "MMR_PARAMS", "MMR_POOLS_FILE", "MMR_ELO_PARALLEL_MIN", "MMR_STATE_DIR",
            "KAFKA_BOOTSTRAP_SERVERS", "REDIS_URL"} <= known_names()
    gone = {"MMR_TEST_FAULT_CRASH_AFTER_BATCHES", "MMR_TEST_FAULT_RATING_BUG_POOL", "MMR_INLINE_DELIVERY"}
    assert not gone & known_names()


def test_settings_built_in_code_are_checked_as_from_the_environment() -> None:
    s = Settings()
    assert s.with_(take_max=5).take_max == 5 and s.take_max == 4096
    assert s.with_(take_within=1).take_within == 1.0
    with pytest.raises(SettingError, match="MMR_ON_RATING_BUG='skip'"):
        s.with_(on_rating_bug="skip")
    with pytest.raises(SettingError, match="MMR_TAKE_MAX='5': expected int"):
        s.with_(take_max="5")
    with pytest.raises(SettingError, match="MMR_REDIS_CLUSTER=1: expected"):
        s.with_(redis_cluster=1)
    with pytest.raises(TypeError):
        s.with_(overlap_commits=True)


def test_to_env_round_trips_through_from_env() -> None:
    s = Settings(app_id="x", take_max=7, take_within=0.5, redis_cluster=False, on_rating_bug="dead-letter",
                 http_port=1234,
                 system="elo", default_params={"k": "20", "scale": "400"}, security_protocol="SASL_SSL",
                 sasl_password=Secret("pw"), log_level="error", state_dir="/tmp/st")
    assert from_env(s.to_env()) == s
    assert from_env(Settings().to_env()) == Settings()


def test_from_env_defaults_apply_only_where_the_variable_is_unset() -> None:
    bench = "redis://127.0.0.1:6379/14"
    assert from_env({}, redis_url=bench).redis_url == bench
    assert from_env({"REDIS_URL": "redis://h:1/2"}, redis_url=bench).redis_url == "redis://h:1/2"


def test_mmr_params_is_parsed_as_param_options_are() -> None:
    assert from_env({"MMR_PARAMS": "k=20, scale = 400,"}).default_params == {"k": "20", "scale": "400"}
    with pytest.raises(SettingError, match="MMR_PARAMS: expected KEY=VALUE, got 'k'"):
        from_env({"MMR_PARAMS": "k"})


def test_the_state_directory() -> None:
    from stream.service.faust_app import faust_kwargs

    assert faust_kwargs(from_env({"MMR_STATE_DIR": "/var/lib/mmr"}))["datadir"] == "/var/lib/mmr"
    assert faust_kwargs(from_env({"MMR_APP_ID": "a1"}))["datadir"].endswith("mmr-faust-a1")


def test_what_a_bug_in_the_rating_step_does_is_a_choice() -> None:
    assert Settings().on_rating_bug == "halt"
    assert from_env({"MMR_ON_RATING_BUG": "Dead-Letter"}).on_rating_bug == "dead-letter"
    with pytest.raises(SettingError, match="MMR_ON_RATING_BUG='crash': expected one of halt, dead-letter"):
        from_env({"MMR_ON_RATING_BUG": "crash"})


def test_elo_mmr_reads_its_parallel_threshold_through_the_settings_when_it_rates() -> None:
    code = ("import os; from stream.ratings.elo_mmr import system; from stream import runtime; "
            "print(system.PARALLEL_MIN_PLAYERS, os.environ.get('MMR_ELO_PARALLEL_MIN') is not None, "
            "runtime.parallel_min_players())")
    out = subprocess.run([sys.executable, "-c", code], env={"MMR_ELO_PARALLEL_MIN": "1234", "PATH": ""},
                         capture_output=True, text=True, check=True).stdout
    assert out.split() == ["None", "True", "1234"]  # not read at import: at the first round
    assert EngineSettings().elo_parallel_min == 3_000


def test_the_cli_reports_a_bad_setting_without_a_traceback(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["export", "--out", str(tmp_path / "x.jsonl")],
                             env={"MMR_ON_RATING_BUG": "sometimes"})
    assert res.exit_code == 2, res.output
    assert "MMR_ON_RATING_BUG='sometimes': expected one of halt, dead-letter" in res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)


def test_the_cli_refuses_a_param_that_is_not_key_value(tmp_path: Path) -> None:
    good = tmp_path / "m.jsonl"
    good.write_text('{"type":"match","event_id":"e1","pool":"p","time":1,"a":"x","b":"y","score":1}\n')
    res = CliRunner().invoke(main, ["replay", str(good), "--system", "elo", "--param", "k", "--embedded",
                                    "--out", str(tmp_path / "o.jsonl"), "--no-progress"])
    assert res.exit_code == 2, res.output
    assert "Invalid value for --param: expected KEY=VALUE, got 'k'" in res.output


#: modules that read the environment: the two settings modules, and numba's own variables
#: (NUMBA_CACHE_DIR, XDG_CACHE_HOME) in stream/runtime/numba_cache.py
ENV_READERS = {"stream/config.py", "stream/service/config.py", "stream/runtime/numba_cache.py"}


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ" and isinstance(node.value, ast.Name) \
        and node.value.id == "os"


def _reads_environment(node: ast.AST) -> bool:
    """``os.environ.get(...)``, ``os.getenv(...)``, ``os.environ[...]`` (read) or ``... in os.environ``."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        f = node.func
        return (f.attr == "get" and _is_environ(f.value)) or (
            f.attr == "getenv" and isinstance(f.value, ast.Name) and f.value.id == "os")
    if isinstance(node, ast.Subscript):
        return isinstance(node.ctx, ast.Load) and _is_environ(node.value)
    return isinstance(node, ast.Compare) and any(_is_environ(c) for c in node.comparators)


def _environment_reads(tree: ast.AST) -> list[int]:
    return sorted(node.lineno for node in ast.walk(tree) if isinstance(node, ast.expr) and _reads_environment(node))


def test_the_package_reads_the_environment_only_through_its_settings() -> None:
    found = {}
    for path in sorted((ROOT / "stream").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in ENV_READERS and (lines := _environment_reads(ast.parse(path.read_text()))):
            found[rel] = lines
    assert found == {}
    assert _environment_reads(ast.parse('import os\nos.environ.get("X")\nos.getenv("Y")\nos.environ["Z"]\n'
                                        '"W" in os.environ\nos.environ["V"] = "1"\n')) == [2, 3, 4, 5]
