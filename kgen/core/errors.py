"""Errors that are the user's input, not kgen's bug: the CLI prints them in one line and exits 2."""


class KgenError(Exception):
    """Bad input to kgen (unknown problem, unreadable file, bad DB URL ...). Message is one line."""
