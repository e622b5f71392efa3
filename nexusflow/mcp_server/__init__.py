"""``nexusflow mcp``: nexusflow as an MCP server, so that an agent or an editor starts,
watches, answers and cancels durable runs with short tools that return at once. The runs
execute where runs execute (a deployment's worker, or a background ``nexusflow`` process of
the server's own), so a client that leaves or a server that restarts loses nothing."""
