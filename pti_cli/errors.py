"""The one error type users see.

Anything raised as PtiError is printed by the CLI as one line on stderr with
exit code 2 and no traceback.  Raise it for every bad input: missing or corrupt
files, mismatched twins, bad option values.
"""


class PtiError(Exception):
    """A user-facing error: one clear line, exit code 2."""
