"""Time: cron and fixed-rate schedules, local time and its daylight saving rule, ETAs.
Everything takes the time as an argument; nothing here reads the clock."""
