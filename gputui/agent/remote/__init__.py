"""The collector's stdio form: the remote importer (boot), the session, serve."""
