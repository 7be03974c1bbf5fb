"""The agent's configuration: the schema (a pydantic model per section, named like the YAML
keys), the converters that name every problem by its key path, and loading with defaults.
"""
