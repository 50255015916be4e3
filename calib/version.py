"""calib's version, for the files it writes (sidecars, manifests, engine records) and `calib --version`."""
__version__ = "0.1.0"
