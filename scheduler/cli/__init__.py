"""The ``cronchain`` command line."""
