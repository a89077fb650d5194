"""The service unit templates (systemd, launchd) as a data package, `agentcoord_service`:
pyproject.toml maps it to this folder; agentcoordctl/service.py reads them."""
