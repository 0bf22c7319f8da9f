-- wrk script: requests spread over pre-created sessions.
--   wrk ... -s bench/wrk/sessions.lua URL -- MODE SESSIONS_FILE [LIMIT]
-- MODE: "state" (GET /v1/sessions/{id}/state/counter), "dispatch" (POST .../dispatch with a
-- counter increment) or "toggle" (POST .../dispatch toggling a todo: the file's lines then have
-- a third column, the todo's id, as bench/tools/filltodos.py writes them). SESSIONS_FILE has
-- "id token" lines (bench/tools/mksessions.py writes it);
-- LIMIT uses only the first LIMIT sessions. Each wrk thread walks the sessions round-robin from
-- its own random offset, so every session is hit at about the same rate.
-- report.lua (beside this file) adds the done() that prints the WRKJSON line.
dofile((debug.getinfo(1, "S").source:match("^@(.*/)") or "./") .. "report.lua")

local reqs = {}
local n = 0
local i = 0

function init(args)
  local mode, file, limit = args[1], args[2], tonumber(args[3] or "0")
  local body = nil
  if mode == "dispatch" then
    body = '{"feature":"counter","action":{"type":"increment"}}'
  elseif mode ~= "state" and mode ~= "toggle" then
    error("MODE must be state, dispatch or toggle, not " .. tostring(mode))
  end
  for line in io.lines(file) do
    local id, token, todo = line:match("^(%S+)%s+(%S+)%s*(%S*)")
    if id then
      n = n + 1
      local headers = { ["Authorization"] = "Bearer " .. token }
      if mode == "toggle" then
        body = '{"feature":"todos","action":{"type":"toggle","id":"' .. todo .. '"}}'
      end
      if body then
        headers["Content-Type"] = "application/json"
        reqs[n] = wrk.format("POST", "/v1/sessions/" .. id .. "/dispatch", headers, body)
      else
        reqs[n] = wrk.format("GET", "/v1/sessions/" .. id .. "/state/counter", headers)
      end
      if limit > 0 and n >= limit then break end
    end
  end
  if n == 0 then error("no sessions in " .. file) end
  math.randomseed(os.time() + (wrk.thread and wrk.thread:get("seed") or 0))
  i = math.random(n) - 1
end

function setup(thread)
  thread:set("seed", math.random(1, 1000000))
end

function request()
  i = i % n + 1
  return reqs[i]
end
