"""Errors that the command line turns into one clear line and exit code 2."""


class HarnessInputError(Exception):
    """Bad input from the user: a file, a field, a flag. The message is the whole story.

    Convention for the message: start with where (a file path, `FILE:LINE: field.path`, or a flag),
    then what is wrong and what was expected. No trailing period needed.
    """


# Exit codes a CI job gates on (see DESIGN.md, "Verdicts fail closed").
EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_BAD_INPUT = 2
EXIT_INCONCLUSIVE = 3
