"""The buyer's program, ``siteagent-client COMMAND``: one module per command (docs/client.md)."""
