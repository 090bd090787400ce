-- Appended to every wrk script the lab runs: prints one machine-readable line
-- "LAB_JSON {...}" with the totals, errors and the latency distribution
-- (microseconds at a fixed grid of percentiles, enough to draw a CDF).
local grid = {0.1, 0.5, 1}
for p = 2, 98, 2 do grid[#grid + 1] = p end
for _, p in ipairs({99, 99.5, 99.9, 99.95, 99.99, 100}) do grid[#grid + 1] = p end

function done(summary, latency, requests)
   local points = {}
   for _, p in ipairs(grid) do
      points[#points + 1] = string.format("[%g,%d]", p, latency:percentile(p))
   end
   local e = summary.errors
   io.write(string.format(
      'LAB_JSON {"requests":%d,"duration_us":%d,"bytes":%d,' ..
      '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d},' ..
      '"latency_us":{"mean":%f,"stdev":%f,"min":%d,"max":%d},"percentiles_us":[%s]}\n',
      summary.requests, summary.duration, summary.bytes,
      e.connect, e.read, e.write, e.status, e.timeout,
      latency.mean, latency.stdev, latency.min, latency.max, table.concat(points, ",")))
end
