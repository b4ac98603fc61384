"""The command line's words: the parser of every subcommand (``parser``) and the option groups kept apart so
that building the parser loads nothing heavy (``exporter``, ``fleet``, ``reset``, ``recording``); shell
completion and the manual page from the same parsers (``completion``).

Importing this package imports none of its modules.
"""
