"""The papers' tables rerun, each script run as ``python -m reproduction.<name>`` (REPRODUCTION.md)."""
