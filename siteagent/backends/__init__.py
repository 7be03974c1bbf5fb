"""Batch-system adapters. Each turns one batch system into ClusterSnapshots and reservations.

``base`` is the interface and its errors; ``registry`` opens a backend by its type name.
``slurm`` and ``pbs`` drive their batch systems' command-line clients on the skeleton of
``command`` (running a client, reading its answer and its failures), with the request checks
of ``checks`` and the snapshot assembly of ``scope``; ``pyslurm`` reaches Slurm through its
Python bindings instead, and ``replay`` is a simulated cluster replaying an SWF trace.
"""
