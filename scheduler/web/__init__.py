"""``cronchain serve``: metrics, health and the web page, computed from the database.

``app`` builds the WSGI app, ``metrics`` its Prometheus collector, ``health`` the checks
it shares with ``cronchain health``, ``serve`` the two commands' bodies."""

# The health checks by name, in the order they are shown (scheduler.web.health says what
# each one checks); here so that the command line names them without importing Celery.
CHECKS = ("database", "broker", "watchdog", "ticks", "alerts", "control_path", "work_path")
