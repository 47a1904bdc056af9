"""`liveserve bench sweep`: replay a workload at every point of a grid, then tabulate and plot.

The spec is a YAML file:

```yaml
replay:          # ReplayOptions fields every point shares (optional)
  dataset: random
  num_requests: 40
grid:            # ReplayOptions field -> list of values; the points are the product, in the order written
  policy: [fcfs-nooffload, liveserve]
  max_concurrency: [1, 4, 8]
  barge_in_prob: [0.0, 0.5]
```

Keys are the fields of `liveserve.bench.replay.options.ReplayOptions` (the options of
`liveserve bench replay`, with underscores), typed as there: `null` for an optional
field's none (`max_concurrency: [null, 4]` includes an unlimited point), `.inf` for an
infinite `request_rate`, paths as given (relative ones to the working directory). The
grid above is 12 points, the first field varying slowest: (fcfs-nooffload, 1, 0.0),
(fcfs-nooffload, 1, 0.5), (fcfs-nooffload, 4, 0.0), ... A field is set in `replay` or in
`grid`, not both; a grid list is non-empty without repeats. `url` is refused: every
point starts its own fresh server. Every mistake, in the spec or in a point's options,
is reported before anything runs, naming the file and the field or point, e.g.
`sweep.yaml: grid.max_concurrency[2]: expected int, got 'x'`. Every point's policy
preset is checked before the first runs, so a preset this build lacks fails the sweep
up front.

The output directory gets:

| file | content |
|---|---|
| `results.json` | `[{"point": {grid field: value}, "result": replay result or null, "error": message or null}]`, rewritten after each point (a killed sweep keeps the finished points) |
| `results.md` | a table: the grid fields, P50/P90 audio TTFP, P90 text TTFT, mean audio RTF, continuity ok-rate, completed req/s, wasted-token ratio, and errors; then the plots, or why one was not drawn |
| `frontier.png` | throughput (completed req/s) vs P90 audio TTFP, a curve per policy along the load |
| `ttfp_cdf.png` | CDF of per-request audio TTFP per policy, at its highest load |
| `continuity.png` | continuity ok-rate vs load (`max_concurrency` or `request_rate`) per policy |
| `waste.png` | wasted-token ratio vs `barge_in_prob` per policy |

A plot whose x axis the grid does not vary (continuity without a varied
`max_concurrency` or `request_rate`, waste without a varied `barge_in_prob`) is not
drawn; results.md says so. See `liveserve.bench.sweep.plots` for the details, and
`liveserve.bench.result_json` for the figures' definitions.
"""

from liveserve.bench.sweep.runner import run_sweep
from liveserve.bench.sweep.spec import SweepSpec, load_sweep_spec

__all__ = ["SweepSpec", "load_sweep_spec", "run_sweep"]
