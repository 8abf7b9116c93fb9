"""The Lua scripts of the Redis backend: each is one atomic, fenced step on one run's keys.

Conventions: ``KEYS[1]`` is the run hash; a missing run answers the error ``NOTFOUND``, a stale
attempt ``FENCED`` (``ARGV[1]``; empty = not fenced). Hash values are JSON, so a status is
compared as ``'"completed"'``. Queue entries are ``<id>\\t<json>``: scripts match them by prefix.
"""

from __future__ import annotations

from app.store.redis.keys import JOBS_STREAM

_HELPERS = """
local run = KEYS[1]
local function id_of(v) return string.match(v, '^([^\\t]*)\\t') end
local function remove_id(key, id)
  for _, v in ipairs(redis.call('LRANGE', key, 0, -1)) do
    if id_of(v) == id then redis.call('LREM', key, 1, v); return v end
  end
  return false
end
local function is_ended(status)
  return status == '"completed"' or status == '"failed"' or status == '"cancelled"'
end
local function ended() return is_ended(redis.call('HGET', run, 'status')) end
local function closed() return ended() or redis.call('HEXISTS', run, 'closed') == 1 end
-- one event (seq allocated here) written and announced like APPEND does
local function add_event(stream, type_, body, channel, note)
  local seq = redis.call('HINCRBY', run, 'last_seq', 1)
  local data = '{"seq":' .. seq .. ',' .. string.sub(body, 2)
  redis.call('XADD', stream, seq .. '-0', 't', type_, 'd', data)
  local text = note .. ':' .. seq .. ':' .. seq .. '\\n' .. seq .. '\\t' .. type_ .. '\\t' .. data
  -- a channel with a hash tag is the run's shard channel (Redis Cluster)
  if string.find(channel, '{', 1, true) then redis.call('SPUBLISH', channel, text)
  else redis.call('PUBLISH', channel, text) end
end
"""
"""The run's key and the helpers every run script may use."""

_PRELUDE = _HELPERS + """
if redis.call('EXISTS', run) == 0 then return redis.error_reply('NOTFOUND') end
if ARGV[1] ~= '' and redis.call('HGET', run, 'attempt') ~= ARGV[1] then
  return redis.error_reply('FENCED')
end
"""
"""The helpers, then the checks of every run script but APPEND: ``NOTFOUND``, ``FENCED``."""

_DISPATCH = """
-- On one node a script that may set its run ``queued`` gets the job stream and the parked
-- index as its last two KEYS (``RedisCore._dispatch_keys``) and adds the run's job in the same
-- step: a process dying after it leaves no queued run without a job. On a cluster (those keys
-- live in other slots) the caller adds the job after the script (``RedisCore._woken``).
local JOBS, PARKED = nil, nil
if #KEYS > 2 and KEYS[#KEYS - 1] == '""" + JOBS_STREAM + """' then
  JOBS, PARKED = KEYS[#KEYS - 1], KEYS[#KEYS]
end
local function set_queued(key)
  redis.call('HSET', key, 'status', '"queued"')
  if JOBS then
    local id = string.match(key, '^al:{[^}]*}:(.+):run$') or string.match(key, '^al:{(.-)}:run$')
    redis.call('XADD', JOBS, '*', 'run', id)
    redis.call('ZREM', PARKED, id)
  end
end
"""
"""``set_queued``: a run queued, and on one node dispatched in the same step."""

_PUBLISH = """
local function publish(channel, note)
  if string.find(channel, '{', 1, true) then redis.call('SPUBLISH', channel, note)
  else redis.call('PUBLISH', channel, note) end
end
"""
"""A channel with a hash tag is a shard channel (Redis Cluster: the run's own, in its slot)."""

# KEYS run, events, ckpt, inflight steer, inflight follow_up
# ARGV attempt, token, n_events, n_ckpt, n_acks, n_fields, channel, note, then the items
# Runs once per model frame, so it reads the run with one HMGET and writes it with one HSET
# (the prelude's checks, the token, seq and fields: 9 calls per frame became 4) and checks
# what the prelude checks, in its order: NOTFOUND, FENCED, a repeated token, ENDED.
APPEND = _HELPERS + _PUBLISH + """
local f = redis.call('HMGET', run, 'attempt', 'token', 'status', 'last_seq')
-- every run hash has a status: without one, look whether the run exists at all
if not f[3] and redis.call('EXISTS', run) == 0 then return redis.error_reply('NOTFOUND') end
if ARGV[1] ~= '' and f[1] ~= ARGV[1] then return redis.error_reply('FENCED') end
local token = ARGV[2]
if token ~= '' and f[2] == token then return tonumber(f[4]) end
local ne, nc, na, nf = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
if ne > 0 and is_ended(f[3]) then return redis.error_reply('ENDED') end
local i = 9
local seq = tonumber(f[4] or '0')
local last = f[4]
local set = {}
local lines, size = {}, 0
local first = seq + 1
for _ = 1, ne do
  seq = seq + 1
  local data = '{"seq":' .. seq .. ',' .. string.sub(ARGV[i + 1], 2)
  redis.call('XADD', KEYS[2], seq .. '-0', 't', ARGV[i], 'd', data)
  size = size + #data
  if size <= 65536 then lines[#lines + 1] = seq .. '\\t' .. ARGV[i] .. '\\t' .. data end
  i = i + 2
end
if ne > 0 then
  last = seq
  set[1], set[2] = 'last_seq', seq
end
for _ = 1, nc do redis.call('RPUSH', KEYS[3], ARGV[i]); i = i + 1 end
for _ = 1, na do
  local key = KEYS[4]
  if ARGV[i] == 'follow_up' then key = KEYS[5] end
  remove_id(key, ARGV[i + 1])
  i = i + 2
end
for _ = 1, nf do
  if ARGV[i] == 'last_seq' then last = ARGV[i + 1] end
  set[#set + 1], set[#set + 2] = ARGV[i], ARGV[i + 1]
  i = i + 2
end
if token ~= '' then set[#set + 1], set[#set + 2] = 'token', token end
if #set > 0 then redis.call('HSET', run, unpack(set)) end
if ne > 0 then
  local note = ARGV[8] .. ':' .. first .. ':' .. seq
  if size <= 65536 then note = note .. '\\n' .. table.concat(lines, '\\n') end
  publish(ARGV[7], note)
end
return tonumber(last or '0')
"""

# KEYS run; ARGV attempt, then field/value pairs
UPDATE = _PRELUDE + """
for i = 2, #ARGV, 2 do redis.call('HSET', run, ARGV[i], ARGV[i + 1]) end
return 1
"""

# KEYS run, q steer, q follow_up, inflight steer, inflight follow_up, taken
# ARGV '', worker (JSON), job entry id. Returns {the new attempt, the run hash as HGETALL
# gives it} (the worker's first read, in the same step), 0 if the run is parked (a stale job
# entry of a run that parked) or the entry is a second one of a run held by a worker or ended
# (its worker took it through another entry, and its own entry is the one a takeover
# claims: a duplicate, which the stranded-run sweep or a retried dispatch can leave, never
# steals a run). An ended run is claimed through its own entry: that is still there only
# when its worker was lost between its end and the job's ack, and the steps after the end
# (its quota slot, usage, webhook: each idempotent) are then the next worker's to take again.
CLAIM = _PRELUDE + """
local f = redis.call('HMGET', run, 'status', 'job', 'worker')
if f[1] == '"requires_action"' then return 0 end
if f[2] and f[2] ~= ARGV[3] and ((f[3] and f[3] ~= 'null') or is_ended(f[1])) then
  return 0
end
local attempt = redis.call('HINCRBY', run, 'attempt', 1)
redis.call('HSET', run, 'worker', ARGV[2], 'job', ARGV[3])
for k = 0, 1 do
  local items = redis.call('LRANGE', KEYS[4 + k], 0, -1)
  for j = #items, 1, -1 do
    redis.call('LPUSH', KEYS[2 + k], items[j])
    redis.call('SREM', KEYS[6], id_of(items[j]))
  end
  redis.call('DEL', KEYS[4 + k])
end
return {attempt, redis.call('HGETALL', run)}
"""

# KEYS run + every other key of the run; ARGV attempt, ttl seconds. Returns the job entry id.
FINISH = _PRELUDE + """
redis.call('HSET', run, 'worker', 'null')
for k = 1, #KEYS do redis.call('EXPIRE', KEYS[k], ARGV[2]) end
return redis.call('HGET', run, 'job') or ''
"""

# KEYS run; ARGV attempt. Returns the job entry id.
RELEASE_RUN = _PRELUDE + """
redis.call('HSET', run, 'worker', 'null')
return redis.call('HGET', run, 'job') or ''
"""

# KEYS run, queue, events, the other queue (+ the dispatch keys on one node); ARGV '', entry,
# message_queued body, channel, note, kind, limit ('' none: the most messages both queues may
# hold together).
# Returns {position, 1 when a steer woke the parked run (the caller adds its job)}; ENDED once
# the queues are closed or the run ended; FULL when both queues hold ``limit`` already.
ENQUEUE = _PRELUDE + _DISPATCH + """
if closed() then return redis.error_reply('ENDED') end
if ARGV[7] ~= '' and redis.call('LLEN', KEYS[2]) + redis.call('LLEN', KEYS[4])
    >= tonumber(ARGV[7]) then
  return redis.error_reply('FULL')
end
local position = redis.call('RPUSH', KEYS[2], ARGV[2])
add_event(KEYS[3], 'message_queued', ARGV[3], ARGV[4], ARGV[5])
if ARGV[6] == 'steer' and redis.call('HGET', run, 'status') == '"requires_action"' then
  set_queued(run)
  return {position, 1}
end
return {position, 0}
"""

# KEYS run, q steer, q follow_up; ARGV attempt. 1: closed; 0: a message is waiting.
CLOSE_QUEUES = _PRELUDE + """
if redis.call('LLEN', KEYS[2]) > 0 or redis.call('LLEN', KEYS[3]) > 0 then return 0 end
redis.call('HSET', run, 'closed', '1')
return 1
"""

# KEYS run, q steer, q follow_up, inflight steer, inflight follow_up, taken, events;
# ARGV '', id, message_withdrawn body (steer), (follow_up), channel, note
WITHDRAW = _PRELUDE + """
for k = 0, 1 do
  for _, v in ipairs(redis.call('LRANGE', KEYS[2 + k], 0, -1)) do
    if id_of(v) == ARGV[2] then
      if closed() then return redis.error_reply('ENDED') end  -- an ended run's queue stays
      redis.call('LREM', KEYS[2 + k], 1, v)
      add_event(KEYS[7], 'message_withdrawn', ARGV[3 + k], ARGV[5], ARGV[6])
      if k == 0 then return 'steer' end
      return 'follow_up'
    end
  end
end
if redis.call('SISMEMBER', KEYS[6], ARGV[2]) == 1 then return 'taken' end
return 'none'
"""

# KEYS run, queue, inflight, taken; ARGV attempt, mode, token. Returns the taken entries.
# The run hash keeps ``took:<inflight key>`` = token TAB ids of the last take: a call whose
# reply was lost (failover, dropped connection) is sent again with the same token and answers
# the same entries instead of taking the next ones (which would strand the first in flight).
TAKE = _PRELUDE + """
local token = ARGV[3] or ''
local mark = 'took:' .. KEYS[3]
if token ~= '' then
  local last = redis.call('HGET', run, mark) or ''
  if string.match(last, '^[^\\t]*') == token then
    local ids = {}
    for id in string.gmatch(string.sub(last, #token + 2), '[^\\t]+') do ids[id] = true end
    local again = {}
    for _, v in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
      if ids[id_of(v)] then again[#again + 1] = v end
    end
    return again
  end
end
local n = 1
if ARGV[2] == 'all' then n = redis.call('LLEN', KEYS[2]) end
local taken, ids = {}, {token}
for _ = 1, n do
  local v = redis.call('LPOP', KEYS[2])
  if not v then break end
  redis.call('RPUSH', KEYS[3], v)
  redis.call('SADD', KEYS[4], id_of(v))
  taken[#taken + 1] = v
  ids[#ids + 1] = id_of(v)
end
if token ~= '' then redis.call('HSET', run, mark, table.concat(ids, '\\t')) end
return taken
"""

# KEYS run, queue, inflight, taken; ARGV '', ids in order. Back to the queue head, in order.
RELEASE = _PRELUDE + """
for j = #ARGV, 2, -1 do
  local v = remove_id(KEYS[3], ARGV[j])
  if v then
    redis.call('LPUSH', KEYS[2], v)
    redis.call('SREM', KEYS[4], ARGV[j])
  end
end
return 1
"""

# KEYS run (+ the dispatch keys on one node); ARGV '', channel, note. 'woken': the run was
# parked and is queued now (on a cluster the caller adds its job).
CANCEL = _PRELUDE + _DISPATCH + _PUBLISH + """
redis.call('HSET', run, 'cancel', '1')
publish(ARGV[2], ARGV[3])
if redis.call('HGET', run, 'status') == '"requires_action"' then
  set_queued(run)
  return 'woken'
end
return 'ok'
"""

# -- parked runs (app.store.redis.parking) ----------------------------------------------------

# KEYS run, parked, decisions, q steer (+ the dispatch keys); ARGV attempt, calls JSON,
# deadline ('' none), now, carried answers JSON, channel, note (``p:<run>``: wakes the run's
# readers, whose streams end at the park)
PARK = _PRELUDE + _DISPATCH + _PUBLISH + """
redis.call('DEL', KEYS[3])
redis.call('HSET', KEYS[2], 'calls', ARGV[2], 'deadline', ARGV[3], 'expired', '',
  'parked_at', ARGV[4], 'carried', ARGV[5])
redis.call('HSET', run, 'worker', 'null')
local job = redis.call('HGET', run, 'job') or ''
if redis.call('LLEN', KEYS[4]) > 0 or redis.call('HGET', run, 'cancel') then
  set_queued(run)
  return {job, 'wake'}
end
redis.call('HSET', run, 'status', '"requires_action"')
publish(ARGV[6], ARGV[7])
return {job, 'parked'}
"""

# KEYS run, parked, decisions, events (+ the dispatch keys); ARGV '', n, channel, note, then
# n × (call id, decision, type, body). Every answer is checked before any is recorded (all or
# none); returns {outcome, status before, the refused call id}.
DECIDE = _PRELUDE + _DISPATCH + _PUBLISH + """
local status = redis.call('HGET', run, 'status')
if status ~= '"requires_action"' then return {'not_waiting', status, ''} end
local calls = cjson.decode(redis.call('HGET', KEYS[2], 'calls') or '[]')
local known = {}
for _, c in ipairs(calls) do known[c['tool_call_id']] = true end
local n = tonumber(ARGV[2])
local seen = {}
for j = 0, n - 1 do
  local id = ARGV[5 + j * 4]
  if not known[id] then return {'unknown_call', status, id} end
  if seen[id] or redis.call('HEXISTS', KEYS[3], id) == 1 then
    return {'already_decided', status, id}
  end
  seen[id] = true
end
local first, seq, size, lines = 0, 0, 0, {}
for j = 0, n - 1 do
  local b = 5 + j * 4
  redis.call('HSET', KEYS[3], ARGV[b], ARGV[b + 1])
  seq = redis.call('HINCRBY', run, 'last_seq', 1)
  if first == 0 then first = seq end
  local data = '{"seq":' .. seq .. ',' .. string.sub(ARGV[b + 3], 2)
  redis.call('XADD', KEYS[4], seq .. '-0', 't', ARGV[b + 2], 'd', data)
  size = size + #data
  lines[#lines + 1] = seq .. '\\t' .. ARGV[b + 2] .. '\\t' .. data
end
local note = ARGV[4] .. ':' .. first .. ':' .. seq
if size <= 65536 then note = note .. '\\n' .. table.concat(lines, '\\n') end
publish(ARGV[3], note)
if redis.call('HLEN', KEYS[3]) >= #calls then
  set_queued(run)
  return {'woken', status, ''}
end
return {'recorded', status, ''}
"""

# KEYS run, parked (+ the dispatch keys); ARGV '', expire-at ('' : wake now). Returns 1 when
# the run was woken.
WAKE = _PRELUDE + _DISPATCH + """
if redis.call('HGET', run, 'status') ~= '"requires_action"' then return 0 end
if ARGV[2] ~= '' then
  local deadline = redis.call('HGET', KEYS[2], 'deadline')
  if not deadline or deadline == '' or tonumber(deadline) > tonumber(ARGV[2]) then return 0 end
  redis.call('HSET', KEYS[2], 'expired', '1')
end
set_queued(run)
return 1
"""

# KEYS counter; ARGV window ms. Returns {hits in the window, ms until it ends}.
COUNT_HIT = """
local hits = redis.call('INCR', KEYS[1])
if hits == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
local left = redis.call('PTTL', KEYS[1])
if left < 0 then redis.call('PEXPIRE', KEYS[1], ARGV[1]); left = tonumber(ARGV[1]) end
return {hits, left}
"""

# KEYS idempotency key; ARGV the value it must still hold, the new value, the most ms it may
# have left to live (younger: its first request may still be writing), its new lifetime (ms).
# Returns 1 when the key now holds the new value, 0 when it no longer held the old one, -1
# when it is too young to be taken over.
TAKE_OVER_KEY = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('PTTL', KEYS[1]) > tonumber(ARGV[3]) then return -1 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[4])
return 1
"""

# -- agents (app.store.redis.agents) -------------------------------------------------------------

# KEYS index, versions; ARGV name, entry, create ('1': refuse an existing agent).
# Returns the new version, 0 when ``create`` found the agent.
PUT_AGENT = """
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
local version = redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[1], ARGV[1], version)
return version
"""

# -- quotas and usage (app.store.redis.quotas) ---------------------------------------------------

# KEYS usage (the day's totals), then per scope: active, rate. ARGV now (ms), run id, then per
# scope: max_active_runs, runs_per_minute, tokens_per_day (-1: no limit), its tokens field.
# Returns {} when admitted (the run added to every set whose limit is set), else {scope index
# (0-based), limit, ms until the limit may admit again (-1: unknown)}.
ADMIT = """
local now, run = tonumber(ARGV[1]), ARGV[2]
local scopes = (#KEYS - 1) / 2
for i = 0, scopes - 1 do
  local active, rate = KEYS[2 + 2 * i], KEYS[3 + 2 * i]
  local most, per_min = tonumber(ARGV[3 + 4 * i]), tonumber(ARGV[4 + 4 * i])
  local per_day, field = tonumber(ARGV[5 + 4 * i]), ARGV[6 + 4 * i]
  if most >= 0 and redis.call('ZCARD', active) >= most then
    return {i, 'max_active_runs', -1}
  end
  if per_min >= 0 then
    redis.call('ZREMRANGEBYSCORE', rate, '-inf', now - 60000)
    if redis.call('ZCARD', rate) >= per_min then
      local oldest = redis.call('ZRANGE', rate, 0, 0, 'WITHSCORES')
      local wait = 60000
      if oldest[2] then wait = tonumber(oldest[2]) + 60000 - now end
      return {i, 'runs_per_minute', wait}
    end
  end
  if per_day >= 0 and tonumber(redis.call('HGET', KEYS[1], field) or '0') >= per_day then
    return {i, 'tokens_per_day', -1}
  end
end
for i = 0, scopes - 1 do
  if tonumber(ARGV[3 + 4 * i]) >= 0 then redis.call('ZADD', KEYS[2 + 2 * i], now, run) end
  if tonumber(ARGV[4 + 4 * i]) >= 0 then
    redis.call('ZADD', KEYS[3 + 2 * i], now, run)
    redis.call('PEXPIRE', KEYS[3 + 2 * i], 61000)
  end
end
return {}
"""

# KEYS usage, accrued. ARGV run id, TTL (s), then field, count pairs. Returns 1 when counted,
# 0 when the run was counted already.
ACCRUE = """
if redis.call('SADD', KEYS[2], ARGV[1]) == 0 then return 0 end
for i = 3, #ARGV, 2 do redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[2], 172800)
return 1
"""

# -- the webhook outbox (app.store.redis.webhooks) -----------------------------------------------

# KEYS due. ARGV now, lease end, limit. Returns the due members, each moved to the lease's end.
CLAIM_WEBHOOKS = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[3])
for _, member in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], member) end
return due
"""
