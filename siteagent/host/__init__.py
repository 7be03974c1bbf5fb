"""What ties the agent to its host: systemd notification (sdnotify), the batch system's notices
on a Unix socket (notices), and what a site installs besides the package (installation).
"""
