"""`siteagent serve`, the composition root: the daemon (daemon), its wiring (assemble) and
SIGHUP's policy (reload). docs/design.md §3.1.
"""
