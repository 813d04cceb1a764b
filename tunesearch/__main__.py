"""`python -m tunesearch`: the command line, as the `tunesearch` script runs it."""
import sys

from tunesearch.cli import main

if __name__ == "__main__":
    sys.exit(main())
