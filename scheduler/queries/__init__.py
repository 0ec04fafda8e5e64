"""Answers read from the records: ``explain``."""
