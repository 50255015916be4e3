"""The `calib` command line: click commands that parse, call the API below and print (main, cache, zoo), with the
option groups and error handling they share (data, common). Nothing below imports from here."""
from calib.cli.main import entry, main

__all__ = ["entry", "main"]
