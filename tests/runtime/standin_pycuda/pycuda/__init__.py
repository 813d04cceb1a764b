"""A stand-in for pycuda over the stand-in driver library (see driver.py)."""
