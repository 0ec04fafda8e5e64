"""Persistence: SQLAlchemy models and the named queries of each table (the only place,
with the migrations, where SQL is written)."""
