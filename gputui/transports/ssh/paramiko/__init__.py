"""The paramiko side of the SSH link: connect (hops), auth, no invoke."""
