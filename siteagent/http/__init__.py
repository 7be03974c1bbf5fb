"""How siteagent's services run: the HTTPS server shared by the agent and the bank, systemd
notification, the socket on which the batch system notifies the agent, and what a site installs
besides the package.
"""
