-- The parts of Kong's PDK written in Lua: `kong.cache`, a cache per worker
-- state with Kong's `get(key, opts, callback, ...)` contract. Run once per
-- state with the `kong` and `ngx` tables.
local kong, ngx = ...
local type, pcall, tostring, tonumber, error, rawset, table = type, pcall, tostring, tonumber, error, rawset, table

-- The most entries one worker's cache holds; past it the cache starts over.
local LIMIT = 10000

local entries, count = {}, 0
local NIL = {}

local cache = {}

local function check_key(key)
  if type(key) ~= "string" then
    error("key must be a string", 3)
  end
end

local function fresh(entry, now)
  return entry and (entry.expires == 0 or entry.expires > now)
end

-- Returns value, err, hit_level (1: this worker's cache; 3: the callback ran).
function cache:get(key, opts, callback, ...)
  check_key(key)
  local now = ngx.now()
  local entry = entries[key]
  if fresh(entry, now) then
    if entry.value == NIL then
      return nil, nil, 1
    end
    return entry.value, nil, 1
  end
  if callback == nil then
    return nil
  end
  if type(callback) ~= "function" then
    error("callback must be a function", 2)
  end
  local ok, value, err, ttl = pcall(callback, ...)
  if not ok then
    return nil, "callback threw an error: " .. tostring(value)
  end
  if err ~= nil then
    return nil, tostring(err)
  end
  if type(opts) == "table" then
    if value == nil then
      ttl = ttl or opts.neg_ttl
    end
    ttl = ttl or opts.ttl
  end
  ttl = tonumber(ttl) or 0
  if ttl >= 0 then
    if count >= LIMIT then
      entries, count = {}, 0
    end
    if not entries[key] then
      count = count + 1
    end
    entries[key] = { value = value == nil and NIL or value, expires = ttl > 0 and now + ttl or 0 }
  end
  return value, nil, 3
end

-- Returns ttl_left, err, value: whether the key is cached, without a callback.
function cache:probe(key)
  check_key(key)
  local now = ngx.now()
  local entry = entries[key]
  if not fresh(entry, now) then
    return nil
  end
  local value = entry.value
  if value == NIL then
    value = nil
  end
  return entry.expires == 0 and 0 or entry.expires - now, nil, value
end

function cache:invalidate(key)
  check_key(key)
  if entries[key] then
    entries[key] = nil
    count = count - 1
  end
  return true
end
cache.invalidate_local = cache.invalidate

function cache:purge()
  entries, count = {}, 0
  return true
end

function cache:cache_key(...)
  local parts = { ... }
  for i = 1, #parts do
    parts[i] = tostring(parts[i])
  end
  return table.concat(parts, ":")
end

rawset(kong, "cache", cache)
