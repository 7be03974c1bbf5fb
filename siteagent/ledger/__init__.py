"""The bank of the marketplace paper: the double-entry ledger, its HTTPS service for a
federation, its participants file, and the agent's client of that service.
"""
