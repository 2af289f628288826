"""Errors that the command line turns into one clear line and exit code 2."""


# Control characters (newlines, terminal escapes) a hostile file may put in a name or a value.
_CONTROL_CHARS = (*range(0x20), 0x7F, *range(0x80, 0xA0), 0x2028, 0x2029)
_CONTROL = {c: f"\\u{c:04x}" if c > 0xFF else f"\\x{c:02x}" for c in _CONTROL_CHARS} | {0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}


def encodable(text: str) -> str:
    """`text` with lone surrogates (JSON allows `\\ud800`; UTF-8 does not) written as `\\ud800`."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def one_line(text: object) -> str:
    """Text as one printable line: control characters escaped, so that a message stays one line and
    cannot move the cursor or recolour the terminal; lone surrogates escaped so that it can be printed."""
    return encodable(str(text)).translate(_CONTROL)


class HarnessInputError(Exception):
    """Bad input from the user: a file, a field, a flag. The message is the whole story.

    Convention for the message: start with where (a file path, `FILE:LINE: field.path`, or a flag),
    then what is wrong and what was expected. No trailing period needed.
    """


# Exit codes a CI job gates on: docs/internals.md, "Exit codes" (the verdicts': docs/rules.md).
EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_BAD_INPUT = 2
EXIT_INCONCLUSIVE = 3
