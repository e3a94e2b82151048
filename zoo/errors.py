"""The one exception type for user mistakes: reported as a sentence, never as a traceback."""


class UserError(Exception):
    """A setting, file or directory the user must change; the message names it."""
