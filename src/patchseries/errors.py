"""The one error type the command line turns into a one-line message and a non-zero exit."""


class SeriesError(Exception):
    """A failure the user can act on; its message is a single line that says what happened and what to do."""
