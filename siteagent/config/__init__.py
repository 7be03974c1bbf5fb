"""The agent's configuration: the schema (frozen dataclasses named like the YAML keys), the
reading toolkit that names every problem by its key path, and loading with defaults.
"""
