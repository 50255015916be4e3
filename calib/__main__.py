"""python -m calib: the calib command line."""
from calib.cli import main

if __name__ == "__main__":
    main()
