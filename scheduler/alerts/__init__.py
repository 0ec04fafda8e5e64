"""Alerts: raised as rows in the transaction of the state change that raises them
(:mod:`scheduler.alerts.raising`), delivered by the work path to the channels a job
names (:mod:`scheduler.alerts.delivery`, :mod:`scheduler.alerts.channels`)."""
