"""How siteagent's services run: the HTTPS server shared by the agent and the bank, and systemd
notification.
"""
