"""Host keys, one concept in three modules: whether to trust the key a host presented (``trust``), the
known_hosts files read and written by hand (``knownhosts``), and the keys the user accepted for the system
ssh client to record (``accepted``).

Importing this package imports none of its modules: a connection through the system ssh, which checks host
keys itself, loads ``accepted`` and neither of the others.
"""
