"""From the command line's words to what a command works on: a target word to a live link (``targets``) and
the idle baselines a host is judged against (``baselines``).

Importing this package imports none of its modules.
"""
