"""Migration environment of the result database (a package so that it ships when installed)."""
