-- Random route (and consumer key) per request. wrk ... -s script -- TARGETS_FILE
-- TARGETS_FILE is written by the config generator: one "path<TAB>key" per
-- line (key may be empty); paths and keys are picked independently, as a
-- client population spread over every route would.
local paths, keys = {}, {}

function init(args)
   local file = assert(io.open(args[1], "r"))
   for line in file:lines() do
      local path, key = line:match("^([^\t]*)\t?(.*)$")
      if path ~= "" then paths[#paths + 1] = path end
      if key ~= "" then keys[#keys + 1] = key end
   end
   file:close()
   math.randomseed(os.time() * 1000 + math.floor(os.clock() * 1e6))
end

function request()
   local path = paths[math.random(#paths)]
   if #keys > 0 then
      return wrk.format("GET", path, { apikey = keys[math.random(#keys)] })
   end
   return wrk.format("GET", path)
end
