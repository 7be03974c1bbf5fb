"""The thin client (buyer's side): sites, quotes across sites, auctions, provisioning and
selection. It may import only :mod:`siteagent.protocol` and the pure :mod:`siteagent.core`
types, never the store or a backend: it is a peer of third-party buyers and speaks only the
published protocol.
"""
