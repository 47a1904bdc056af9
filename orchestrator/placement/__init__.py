"""Where stage replicas run: threads, processes, Ray actors; their handles, wires and memory plans."""
