"""Suite-wide fixtures: one async backend, the recorded fixtures' location, a fake clock."""

from __future__ import annotations

import datetime as dt
import os
import signal
from pathlib import Path

import pytest

import progress

# A suite started in the background of a non-interactive shell (`scripts/test-all &`,
# nohup, a CI runner's background step) inherits SIGINT ignored, and exec keeps an
# ignored signal ignored: every ctl a test stops with Ctrl-C (status --watch) would then
# never see it and run until killed. Python's own handler here: children start with
# the default disposition again (and pytest itself stops on Ctrl-C).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Recorded data copied verbatim from ../shared (each directory's README.md says
# from where); the suite never reads ../shared itself, a fresh clone has none.
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def pytest_configure(config: pytest.Config) -> None:
    progress.install(config)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The default run leaves out tests marked `slow`; any -m expression (scripts/test-all
    passes "slow or not slow") or a test named by its node id selects them."""
    if config.option.markexpr:
        return
    named = [arg.replace("\\", "/") for arg in config.args if "::" in arg]
    keep, slow = [], []
    for item in items:
        explicit = any(item.nodeid == n or item.nodeid.startswith(n + "[") or n.endswith(item.nodeid)
                       for n in named)
        (slow if item.get_closest_marker("slow") and not explicit else keep).append(item)
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = keep


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def fixtures_dir() -> Path:
    """tests/fixtures: agent-coord's recorded outputs, state root and contracts."""
    return FIXTURES


class FakeClock:
    """A controllable wall clock (the only fake the suite uses)."""

    def __init__(self, start: dt.datetime | None = None) -> None:
        self.current = start or dt.datetime(2026, 6, 13, 0, 30, tzinfo=dt.timezone.utc)

    def now(self) -> dt.datetime:
        return self.current

    def advance(self, **delta: float) -> None:
        self.current += dt.timedelta(**delta)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def record_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The paths the parsed-record cache reads from disk, in order (it is filled as
    the test's scans run)."""
    from agentcoordd.store import cache as cache_module

    loads: list[str] = []
    real_load = cache_module._load

    def counting_load(full: str, path: str, digest: object) -> object:
        loads.append(path)
        return real_load(full, path, digest)

    monkeypatch.setattr(cache_module, "_load", counting_load)
    return loads


OTHER_USER = "agentcoord-other"  # created by scripts/test-all
CREATE_OTHER_USER = f"useradd --system --no-create-home --shell /usr/sbin/nologin {OTHER_USER}"
CHECKOUT = Path(__file__).resolve().parents[1]


def _unavailable(reason: str) -> None:
    """Outside CI a missing second user skips, naming the fix; CI must run these cases."""
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true: {reason}")
    pytest.skip(reason)


def second_user_prefix() -> list[str]:
    """The command prefix that runs a child as `agentcoord-other` (we are root). Skips
    (fails under CI=true) when that user is missing or cannot run this checkout's Python:
    a clone under a private home (/root is 0700) is out of its reach."""
    import pwd
    import shutil
    import subprocess
    import sys

    setpriv = shutil.which("setpriv")
    assert setpriv is not None, "setpriv (util-linux) is needed to act as a second user"
    try:
        user = pwd.getpwnam(OTHER_USER)
    except KeyError:
        _unavailable(f"running as root, the permission cases run as the user {OTHER_USER}, "
                     f"which does not exist: create it with `{CREATE_OTHER_USER}` "
                     "(scripts/test-all does)")
    prefix = [setpriv, "--reuid", str(user.pw_uid), "--regid", str(user.pw_gid), "--clear-groups"]
    reach = subprocess.run([*prefix, sys.executable, "-c", "import agentcoordd"], cwd="/",
                           capture_output=True, text=True, timeout=60)
    if reach.returncode != 0:
        _unavailable(f"the user {OTHER_USER} cannot run {sys.executable} with this checkout "
                     f"({CHECKOUT}): a parent directory is not readable by other users "
                     f"(`namei -l {CHECKOUT}` shows which); clone to a readable place such as /srv")
    return prefix


@pytest.fixture(scope="session")
def other_user() -> list[str]:
    """The command prefix that runs a child as a second, unprivileged user (root needed)."""
    if os.geteuid() != 0:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but not root: the second-user permission cases need root")
        pytest.skip("a second Unix user needs root (setpriv): scripts/test-all runs these as root")
    return second_user_prefix()


@pytest.fixture(scope="session")
def permission_bits_apply() -> list[str]:
    """The command prefix under which file permission bits bind: nothing for an ordinary
    user, `agentcoord-other` for root (root reads a chmod 000 file regardless)."""
    return second_user_prefix() if os.geteuid() == 0 else []
