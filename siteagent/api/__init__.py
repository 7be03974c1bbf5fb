"""The agent's HTTP API: FastAPI routes, the error mapping, and where quotes are priced."""
