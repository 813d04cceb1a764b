"""The fuzz tests: malformed models, inputs, exports and settings through the command line,
each checked against the contract of `contract.py`."""
