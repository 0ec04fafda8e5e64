"""What the tests share, by topic; a test module imports these, never another test module
(tests/unit/test_test_layout.py holds the suite to it).

- ``engine``: the fixed clock, the recording port, an engine built on them
- ``deliver``: carrying the recorded messages through, as workers would
- ``jobs``: job specs, applying them, job files
- ``rows``: reading runs, alerts and jobs back from the database
- ``slots``: firing an ``every 10s`` job slot by slot from a fixed start
- ``upstream``: ``requires`` and the races around it
- ``metrics``, ``web``, ``cli``, ``beat``, ``repo``, ``wait``: what their names say
- ``services``, ``receivers``, ``locks``: real servers and PostgreSQL's lock waits
- ``databases``: migrated PostgreSQL databases, cloned once and emptied for each test
"""
