"""A machine's configuration files in a temp dir, for the daemon's settings tests."""

from __future__ import annotations

import os
from pathlib import Path


def machine(tmp_path: Path, *, toml: str | None = None, env_file: str | None = None,
            **env: str) -> dict[str, str]:
    """The daemon's environment with agentcoordd.toml and the consumer env file written."""
    config = tmp_path / "config"
    if toml is not None:
        (config / "agentcoord").mkdir(parents=True, exist_ok=True)
        (config / "agentcoord" / "agentcoordd.toml").write_text(toml)
    if env_file is not None:
        (config / "agent-coord").mkdir(parents=True, exist_ok=True)
        (config / "agent-coord" / "env").write_text(env_file)
    return {"HOME": str(tmp_path), "XDG_CONFIG_HOME": str(config),
            "PATH": os.environ.get("PATH", os.defpath), **env}
