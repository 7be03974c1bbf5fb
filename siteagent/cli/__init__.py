"""The command lines, ``siteagent ...`` and ``siteagent-client ...``: argument parsing and
tables only; every command calls the library.
"""
