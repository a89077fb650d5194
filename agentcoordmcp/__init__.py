"""agentcoord-mcp: the coordination protocol as MCP tools (docs/mcp.md)."""
