"""python -m calib: the calib command line."""
from calib.cli import entry

if __name__ == "__main__":
    entry()
