"""The site's program, ``siteagent COMMAND``: one module per command (docs/admin.md)."""
