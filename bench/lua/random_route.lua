-- Random route (and consumer key) per request. wrk ... -s script -- TARGETS_FILE
-- TARGETS_FILE is written by the config generator: one "path<TAB>key" per
-- line (key may be empty); paths and keys are spread over every route and
-- every consumer, as a client population would be.
--
-- The requests are formatted once, in init, and one of them is picked per
-- request. Formatted per call, every request was a new Lua string once there
-- were many routes (with one route Lua's string table hands back the same
-- one), so the load generator's own cost per request grew with the route
-- count, and on a shared core that showed up as the gateway's throughput
-- falling.
local paths, keys, requests = {}, {}, {}

function init(args)
   local file = assert(io.open(args[1], "r"))
   for line in file:lines() do
      local path, key = line:match("^([^\t]*)\t?(.*)$")
      if path ~= "" then paths[#paths + 1] = path end
      if key ~= "" then keys[#keys + 1] = key end
   end
   file:close()
   assert(#paths > 0, "no paths in " .. args[1])
   math.randomseed(os.time() * 1000 + math.floor(os.clock() * 1e6))
   -- Every path and every key is in at least one request. With keys there
   -- are four requests for each path or key (at least 4,096, and no more
   -- than 65,536 unless there are more paths or keys than that), the rest
   -- paired at random, so each path meets several keys and each key several
   -- paths.
   local order = {}
   for i = 1, #keys do order[i] = i end
   for i = #order, 2, -1 do
      local j = math.random(i)
      order[i], order[j] = order[j], order[i]
   end
   local count = #paths
   if #keys > 0 then
      local most = math.max(#paths, #keys)
      count = math.max(most, 4096, math.min(4 * most, 65536))
   end
   for i = 1, count do
      local path = i <= #paths and paths[i] or paths[math.random(#paths)]
      if #keys > 0 then
         local key = i <= #keys and keys[order[i]] or keys[math.random(#keys)]
         requests[i] = wrk.format("GET", path, { apikey = key })
      else
         requests[i] = wrk.format("GET", path)
      end
   end
end

function request()
   return requests[math.random(#requests)]
end
