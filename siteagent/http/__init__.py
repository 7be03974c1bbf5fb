"""The HTTP plumbing both services share (the agent's API and the bank's): the uvicorn server
and its stop, the request gate, size and connection limits, and the JSON error pages.
"""
