"""Use this when the test needs real processes: agents, a market, a bank, PostgreSQL, crash runs."""
