"""A job's spec: its grammar, its validation, and the controls the engine reads."""
