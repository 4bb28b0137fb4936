"""Durable collector state through SQLAlchemy Core (SQLite embedded, PostgreSQL in production)."""

from uldp.collector.storage.db import Database, open_database
from uldp.collector.storage.schema import SCHEMA_VERSION, metadata

__all__ = ["SCHEMA_VERSION", "Database", "metadata", "open_database"]
