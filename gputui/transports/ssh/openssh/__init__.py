"""The system OpenSSH client as the SSH link's transport."""
