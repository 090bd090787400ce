-- Strait's environments for untrusted Lua (pre-function, post-function):
-- Kong's `untrusted_lua = sandbox` whitelist and `on`'s open environment.
-- Run once per worker state with the settings' lists and the PDK tables;
-- returns two functions that each make one chunk's environment, so a
-- chunk's globals never reach another chunk or the state's own _G.
local requires, environment, kong, ngx, expired = ...

local G = _G
local error, ipairs, pairs, setmetatable, tostring, type, require =
  error, ipairs, pairs, setmetatable, tostring, type, require

-- Past the call's time budget, an error caught by user code is raised
-- again as the catching function returns, so a loop around `pcall` cannot
-- outlive the budget. Replaced in the state itself: every environment
-- below copies or reads these.
local function again(ok, ...)
  if not ok and expired() then
    error((...), 0)
  end
  return ok, ...
end
local pcall, xpcall, resume = G.pcall, G.xpcall, G.coroutine.resume
G.pcall = function(...)
  return again(pcall(...))
end
G.xpcall = function(...)
  return again(xpcall(...))
end
G.coroutine.resume = function(...)
  return again(resume(...))
end

-- Globals copied as they are.
local GLOBALS = {
  "_VERSION", "assert", "error", "ipairs", "next", "pairs", "pcall", "select",
  "tonumber", "tostring", "type", "unpack", "xpcall",
}

-- Modules exposed through read-only proxies holding only these members.
local MODULES = {
  coroutine = { "create", "resume", "running", "status", "wrap", "yield" },
  math = {
    "abs", "acos", "asin", "atan", "atan2", "ceil", "cos", "cosh", "deg", "exp",
    "fmod", "floor", "frexp", "huge", "ldexp", "log", "log10", "max", "min", "modf",
    "pi", "pow", "rad", "random", "sin", "sinh", "sqrt", "tan", "tanh",
  },
  os = { "clock", "date", "difftime", "time" },
  string = {
    "byte", "char", "find", "format", "gmatch", "gsub", "len", "lower", "match",
    "rep", "reverse", "sub", "upper",
  },
  table = { "concat", "insert", "maxn", "remove", "sort" },
}

local protected = {}
for name, members in pairs(MODULES) do
  local module, copy = G[name], {}
  for _, member in ipairs(members) do
    copy[member] = module[member]
  end
  protected[name] = setmetatable({}, {
    __index = copy,
    __newindex = function(_, key)
      error("Can not modify " .. name .. "." .. tostring(key) .. ". Protected by the sandbox.", 2)
    end,
    __metatable = false,
  })
end

-- What `untrusted_lua_sandbox_requires` and `_environment` add.
local allowed = {}
for _, name in ipairs(requires) do
  allowed[name] = true
end
local configured = {}
configured.require = function(name)
  if allowed[name] then
    return require(name)
  end
  error("require '" .. tostring(name) .. "' not allowed within sandbox")
end
for _, dotted in ipairs(environment) do
  local source, target = G, configured
  local parts = {}
  for part in dotted:gmatch("[^.]+") do
    parts[#parts + 1] = part
  end
  for at, part in ipairs(parts) do
    if type(source) ~= "table" then
      break
    end
    source = source[part]
    if source == nil then
      break
    end
    if at == #parts then
      if type(source) == "table" then
        -- Read through, never written back.
        target[part] = setmetatable({}, { __index = source })
      else
        target[part] = source
      end
    else
      target[part] = target[part] or {}
      target = target[part]
    end
  end
end

local fallback = setmetatable({ kong = kong, ngx = ngx }, { __index = configured })

local function sandboxed()
  local env = {}
  for _, name in ipairs(GLOBALS) do
    env[name] = G[name]
  end
  for name, proxy in pairs(protected) do
    env[name] = proxy
  end
  env._G = env
  -- Held in the environment itself: the PDK is reached on every call, and a
  -- miss through the metatable costs a metamethod each time.
  env.kong, env.ngx = kong, ngx
  return setmetatable(env, { __index = fallback })
end

local function open()
  return setmetatable({ kong = kong, ngx = ngx }, { __index = G })
end

return sandboxed, open
