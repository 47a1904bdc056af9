"""Benchmarks an installed LiveServe can run: `liveserve bench engine | replay | sweep | duplex` (see `cli`)."""
