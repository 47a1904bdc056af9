"""`liveserve bench duplex`: continuous full-duplex speech streams against a server, measured per frame.

N streams of looped fixture speech (or an open-loop ramp of arrivals) talk to a fresh
server per run; every `liveserve.duplex.frame` event and a /metrics poll every half
second become per-10-s latency percentiles, the KV occupancy timeline, stalls and the
saturation time, measured and predicted. Module map: `options` (what a run does),
`server_config` (the YAML it serves from), `speech_loop`, `records`, `stream` (one session),
`poller` (/metrics), `analysis`, `saturation` and `ramp` (pure figures), `result`,
`plots`, `run` and `command`.
"""
