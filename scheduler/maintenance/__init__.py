"""The watchdog's budgeted pass and the history's upkeep."""
