"""What screens subscribe to: hosts and their pollers, the kill flow, clean checks."""
