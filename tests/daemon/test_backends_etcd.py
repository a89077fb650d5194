"""etcd selection and configuration in daemon/backends.py (pure: no daemon, no etcd)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentcoordd import protocol as p
from agentcoordd.daemon import backends
from agentcoordd.model.errors import OperationalError, UsageError

ENDPOINTS = "http://127.0.0.1:1,http://127.0.0.1:2"


def resolve(env: dict[str, str], selection: p.Selection | None = None, cwd: str = "/work",
            daemon_env: dict[str, str] | None = None) -> backends.Resolved:
    env = {"HOME": "/nonexistent-home", "XDG_CONFIG_HOME": "/nonexistent-config", **env}
    return backends.resolve(selection or p.Selection(), env, cwd, daemon_env or {})


def test_endpoints_with_user_password_ca_and_prefix_from_the_environment() -> None:
    r = resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, "AGENT_COORD_ETCD_USER": "m1",
                 "AGENT_COORD_ETCD_PASSWORD": "pw", "AGENT_COORD_ETCD_CA_FILE": "pki/ca.crt",
                 "AGENT_COORD_ETCD_PREFIX": "team-a/"})
    assert (r.kind, r.location, r.source, r.user, r.token) == ("etcd", ENDPOINTS, "environment", "m1", "pw")
    assert dict(r.options) == {"ca_file": "/work/pki/ca.crt", "key_prefix": "team-a/"}
    assert r.describe() == {"kind": "etcd", "location": ENDPOINTS, "source": "environment",
                            "credentials": True, "ca_file": "/work/pki/ca.crt", "key_prefix": "team-a/"}
    assert "pw" not in repr(r) and "pw" not in str(r.key)


def test_password_file_first_line_is_the_password(tmp_path: Path) -> None:
    secret = tmp_path / "pw"
    secret.write_text("s3cret\r\nignored\n")
    r = resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, "AGENT_COORD_ETCD_USER": "m1",
                 "AGENT_COORD_ETCD_PASSWORD_FILE": str(secret)})
    assert r.token == "s3cret"
    secret.write_text("rotated\n")  # read on every call: a rotation needs no restart
    assert resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, "AGENT_COORD_ETCD_USER": "m1",
                    "AGENT_COORD_ETCD_PASSWORD_FILE": str(secret)}).token == "rotated"


@pytest.mark.parametrize(("extra", "message"), [
    ({"AGENT_COORD_ETCD_USER": "m1"}, "AGENT_COORD_ETCD_PASSWORD or AGENT_COORD_ETCD_PASSWORD_FILE is not set"),
    ({"AGENT_COORD_ETCD_PASSWORD": "pw"}, "AGENT_COORD_ETCD_USER is not set"),
    ({"AGENT_COORD_ETCD_USER": "m1", "AGENT_COORD_ETCD_PASSWORD": "pw",
      "AGENT_COORD_ETCD_PASSWORD_FILE": "/x"}, "set only one"),
    ({"AGENT_COORD_ETCD_USER": "m1", "AGENT_COORD_ETCD_PASSWORD_FILE": "/nonexistent/pw"},
     "cannot read etcd password file /nonexistent/pw (environment)"),
])
def test_incomplete_credentials_are_operational_errors(extra: dict[str, str], message: str) -> None:
    with pytest.raises(OperationalError) as caught:
        resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, **extra})
    assert message in caught.value.message


def test_empty_password_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "pw").write_text("\n")
    with pytest.raises(OperationalError, match="is empty"):
        resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, "AGENT_COORD_ETCD_USER": "m1",
                 "AGENT_COORD_ETCD_PASSWORD_FILE": str(tmp_path / "pw")})


def test_flag_takes_its_settings_from_the_caller_environment_only() -> None:
    r = resolve({"AGENT_COORD_ETCD_PREFIX": "team-b"}, p.Selection(etcd_endpoints=ENDPOINTS),
                daemon_env={"AGENT_COORD_ETCD_USER": "daemon-user", "AGENT_COORD_ETCD_PASSWORD": "x"})
    assert (r.source, r.user, r.token, dict(r.options)) == (
        "--etcd-endpoints", None, None, {"key_prefix": "team-b"})


def test_daemon_environment_settings_travel_with_its_endpoints() -> None:
    r = resolve({"AGENT_COORD_ETCD_PREFIX": "caller-prefix"},
                daemon_env={"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, "AGENT_COORD_ETCD_USER": "m1",
                            "AGENT_COORD_ETCD_PASSWORD": "pw"})
    assert (r.source, r.user, r.options) == ("daemon environment", "m1", ())


def test_two_selectors_in_the_environment_warn_and_follow_the_order() -> None:
    http = resolve({"AGENT_COORD_API_URL": "http://127.0.0.1:9", "AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS})
    assert http.kind == "http" and backends.API_AND_ETCD_WARNING in http.warnings
    etcd = resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, "AGENT_COORD_STATE_ROOT": "/tmp/r"})
    assert etcd.kind == "etcd" and backends.ETCD_AND_ROOT_WARNING in etcd.warnings


def test_two_explicit_selectors_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match="choose one backend"):
        resolve({}, p.Selection(api_url="http://127.0.0.1:9", etcd_endpoints=ENDPOINTS))


def test_pool_keys_differ_by_prefix_and_credentials() -> None:
    base = {"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS}
    keys = {resolve(base).key, resolve({**base, "AGENT_COORD_ETCD_PREFIX": "a/"}).key,
            resolve({**base, "AGENT_COORD_ETCD_PREFIX": "b/"}).key,
            resolve({**base, "AGENT_COORD_ETCD_USER": "u", "AGENT_COORD_ETCD_PASSWORD": "1"}).key,
            resolve({**base, "AGENT_COORD_ETCD_USER": "u", "AGENT_COORD_ETCD_PASSWORD": "2"}).key}
    assert len(keys) == 5


async def test_pool_opens_an_etcd_store_with_prefix_and_refuses_bad_configuration(tmp_path: Path) -> None:
    pool = backends.StorePool()
    try:
        store = pool.get(resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS,
                                  "AGENT_COORD_ETCD_PREFIX": "team-a"}))
        assert store.key_prefix == "team-a/" and store.client.endpoints == ENDPOINTS.split(",")
        with pytest.raises(OperationalError, match="invalid etcd configuration .*key prefix"):
            pool.get(resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS, "AGENT_COORD_ETCD_PREFIX": "/x"}))
        missing = tmp_path / "ca.crt"
        with pytest.raises(OperationalError, match=f"cannot load etcd TLS files {missing}"):
            pool.get(resolve({"AGENT_COORD_ETCD_ENDPOINTS": ENDPOINTS,
                              "AGENT_COORD_ETCD_CA_FILE": str(missing)}))
        with pytest.raises(UsageError, match="http:// or https://"):
            pool.get(resolve({}, p.Selection(etcd_endpoints="ftp://127.0.0.1:1")))
    finally:
        await pool.aclose()
