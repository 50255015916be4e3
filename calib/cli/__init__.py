"""The `calib` command line: click commands that parse, call the API below and print (main, cache, zoo), with the
option groups and error handling they share (data, common). Nothing below imports from here. The process around
them (Ctrl-C and SIGTERM watched first, the exit) is calib.__main__."""
from calib.cli.main import main

__all__ = ["main"]
