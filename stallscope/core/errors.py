"""One exception tree for user-facing errors; each message names the offending value.

Exit codes (documented in README and docs/cli.md):
    0  success / no finding at or above --fail-on
    1  findings at or above --fail-on (analyze)
    2  user error: bad input, bad flag, missing file, unavailable driver
    3  internal error (a bug; rerun with STALLSCOPE_DEBUG=1 for the traceback)
  130  interrupted
"""


class ToolkitError(Exception):
    """Base of every error that the CLI reports as one line and exit code 2."""

    exit_code = 2

    def __init__(self, message: str):
        if not message:
            raise TypeError("ToolkitError needs a message")
        super().__init__(message)


class InputError(ToolkitError):
    """Bad user input: a file, a flag value, a prompt."""


class ConfigError(ToolkitError):
    """A malformed configuration file or option."""


class SchemaError(ToolkitError):
    """A frame does not match its declared schema."""


class CollectorError(ToolkitError):
    """A source could not be read (file, endpoint, driver)."""


class TraceError(ToolkitError):
    """An Nsight Systems export that cannot be read."""
