"""`liveserve bench sweep`: a replay or duplex run at every point of a grid, then a table and plots.

The spec is a YAML file:

```yaml
command: replay  # or duplex; replay when absent
replay:          # options of that command every point shares (optional); the section is named after it
  dataset: random
  num_requests: 40
  set: [server.max_sessions=200]  # config overrides of every point's fresh server
grid:            # option -> list of values; the points are the product, in the order written
  policy: [fcfs-nooffload, liveserve]
  max_concurrency: [1, 4, 8]
  barge_in_prob: [0.0, 0.5]
```

Keys are the fields of the command's options, `lab.replay.options.ReplayOptions`
or `lab.duplex.options.DuplexOptions` (the flags of `liveserve bench replay` or
`duplex`, with underscores), typed as there: `null` for an optional field's none
(`max_concurrency: [null, 4]` includes an unlimited point), `.inf` for an infinite
`request_rate`, paths as given (relative ones to the working directory). `set` stands for
`--set`: in the shared settings a list of `KEY.PATH=VALUE` overrides; in the grid a list
whose values are each one override or a list of them (`[]`: none), applied after the
shared ones. The grid above is 12 points, the first field varying slowest:
(fcfs-nooffload, 1, 0.0), (fcfs-nooffload, 1, 0.5), (fcfs-nooffload, 4, 0.0), ... A key
other than `set` is set in the shared settings or in `grid`, not both; a grid list is
non-empty without repeats. `url` is refused (every point starts its own fresh server),
and so is duplex's `admission_set` (give `set: [admission.NAME=VALUE]`). Every mistake, in
the spec or in a point's options, is reported before anything runs, naming the file and
the field or point, e.g. `sweep.yaml: grid.max_concurrency[2]: expected int, got 'x'`.
Every point's server config (policy preset and overrides) is validated before the first
runs, so a preset this build lacks or a misspelt key fails the sweep up front.

The output directory gets:

| file | content |
|---|---|
| `results.json` | `[{"point": {grid key: value}, "result": the command's result or null, "error": message or null}]`, rewritten after each point (a killed sweep keeps the finished points) |
| `results.md` | a table: the grid keys, the command's headline figures (replay: P50/P90 audio TTFP, P90 text TTFT, mean audio RTF, continuity ok-rate, completed req/s, wasted-token ratio; duplex: sessions admitted and rejected, P50/P99 frame latency, frames/s, stalled sessions, peak KV occupancy, t_sat measured and predicted) and errors; then the plots, or why one was not drawn |
| `frontier.png` | replay: throughput (completed req/s) vs P90 audio TTFP, a curve per policy along the load |
| `ttfp_cdf.png` | replay: CDF of per-request audio TTFP per policy, at its highest load |
| `continuity.png` | replay: continuity ok-rate vs load (`max_concurrency` or `request_rate`) per policy |
| `waste.png` | replay: wasted-token ratio vs `barge_in_prob` per policy |

A duplex sweep draws no plots. A replay plot whose x axis the grid does not vary
(continuity without a varied `max_concurrency` or `request_rate`, waste without a varied
`barge_in_prob`) is not drawn; results.md says so. See `lab.sweep.plots` for
the details, and `lab.result_json` and `lab.duplex.result` for the
figures' definitions.
"""

from lab.sweep.runner import run_sweep
from lab.sweep.spec import SweepSpec, load_sweep_spec

__all__ = ["SweepSpec", "load_sweep_spec", "run_sweep"]
