"""The collector's view of processes: /proc, the job rule, trees, threads, ports."""
