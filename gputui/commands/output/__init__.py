"""What the commands print: the streams every command writes through (``streams``), the verdict block of
``check`` and ``snapshot`` (``verdict_text``) and the shape of ``snapshot --json`` (``snapshot_document``).

Importing this package imports none of its modules.
"""
