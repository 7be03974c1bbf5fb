"""siteagent: a per-cluster site agent and a thin market client for HPC batch systems."""

__version__ = "0.1.0"
