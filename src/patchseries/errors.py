class SeriesError(Exception):  # the one error type the command line turns into one `error:` line and exit 2
    """A failure the user can act on; its message is a single line that says what happened and what to do."""
