"""A GPU reset planned and run on the host: who holds the device nodes, the modes, the steps."""
