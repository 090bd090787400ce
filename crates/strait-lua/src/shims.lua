-- Strait's stand-ins for the Kong modules custom plugins require at load
-- time: `kong.meta` and `kong.db.schema.typedefs` (the typedefs plugins'
-- schemas use most). Each typedef is a field definition; calling it with a
-- table returns a copy with those keys replaced, as Kong's Schema.define
-- does. `strait_check` names a check Strait applies in Rust.
local setmetatable, pairs, error, tostring = setmetatable, pairs, error, tostring

local function define(def)
  return setmetatable(def, {
    __call = function(self, overrides)
      local copy = {}
      for k, v in pairs(self) do
        copy[k] = v
      end
      for k, v in pairs(overrides or {}) do
        copy[k] = v
      end
      return define(copy)
    end,
  })
end

local PROTOCOLS = { "grpc", "grpcs", "http", "https", "tcp", "tls", "tls_passthrough", "udp", "ws", "wss" }

local typedefs = {
  header_name = define({ type = "string", strait_check = "header_name" }),
  no_consumer = define({ type = "foreign", reference = "consumers", eq = "null" }),
  no_route = define({ type = "foreign", reference = "routes", eq = "null" }),
  no_service = define({ type = "foreign", reference = "services", eq = "null" }),
  protocols = define({
    type = "set",
    required = true,
    default = { "grpc", "grpcs", "http", "https" },
    elements = { type = "string", one_of = PROTOCOLS },
  }),
  protocols_http = define({
    type = "set",
    required = true,
    default = { "http", "https" },
    elements = { type = "string", one_of = { "http", "https" } },
    strait_protocols_http = true,
  }),
  port = define({ type = "integer", between = { 0, 65535 } }),
  timeout = define({ type = "integer", between = { 0, 2147483646 } }),
  uuid = define({ type = "string", uuid = true }),
  host = define({ type = "string" }),
  url = define({ type = "string" }),
  path = define({ type = "string" }),
}

setmetatable(typedefs, {
  __index = function(_, key)
    error("schema typedef error: definition " .. tostring(key) .. " does not exist", 2)
  end,
})

package.preload["kong.db.schema.typedefs"] = function()
  return typedefs
end
package.preload["kong.meta"] = function()
  return { _NAME = "kong", _VERSION = "3.9.1", version = "3.9.1", _VERSION_TABLE = { major = 3, minor = 9, patch = 1 } }
end
