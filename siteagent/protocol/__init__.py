"""What crosses the wire between buyers, sites and the bank: request and response models, the
signed documents of a deal (RFC 8785 canonical JSON), RFC 9421 request signatures and Ed25519
keys, and the HTTPS sessions buyer and agent send with (sessions). Shared by the agent, the
ledger and the client; it imports only the pure core.
"""
