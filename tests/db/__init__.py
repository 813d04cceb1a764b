"""Tests of the result database (tunesearch/db)."""
