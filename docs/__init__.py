"""The operations guides as a data package, `agentcoord_docs`: pyproject.toml maps it to
this folder, so a wheel carries them; `agentcoordctl docs TOPIC` prints one."""
