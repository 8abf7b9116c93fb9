"""The Lua scripts of threads: each one atomic step on one thread and its runs (one slot).

Every key is passed in ``KEYS`` (names from ``redis_keys``): the thread, its history, its run
list, then eight keys per run role (``redis_keys.thread_run_keys``: run, events, ckpt, q steer,
q follow_up, inflight steer, inflight follow_up, input). The caller reads the thread's
``active_run``/``next_run`` first and passes them as expected (``ARGV[1]``, ``ARGV[2]``);
a thread that changed meanwhile answers ``stale`` and the caller reads again.
Hash values of runs are JSON (a status compares as ``'"completed"'``); queue entries are
``<id>\\t<json>``.
"""

from __future__ import annotations

from app.store.redis.keys import JOBS_STREAM

_PRELUDE = """
local T, MSGS, RUNS = KEYS[1], KEYS[2], KEYS[3]
local function rk(role, i) return KEYS[3 + role * 8 + i] end
local function terminal(s)
  return s == '"completed"' or s == '"failed"' or s == '"cancelled"'
end
local THREAD = string.match(T, '^al:{(.-)}:')
-- a note; channel '' (Redis Cluster): the shard channel of the run (or thread) ``id``, which
-- is in this thread's slot (redis_keys.notes_channel)
local function notify(channel, id, note)
  if channel ~= '' then return redis.call('PUBLISH', channel, note) end
  local ch = 'al:{' .. THREAD .. '}:notes'
  if id ~= THREAD then ch = 'al:{' .. THREAD .. '}:' .. id .. ':notes' end
  redis.call('SPUBLISH', ch, note)
end
-- On one node KEYS ends with the job stream, the parked index and the tenant's run and thread
-- indexes (``RedisThreads._dispatch``): a run this script starts or wakes gets its job (a
-- started one its place in the index too), a thread it creates its place in the thread
-- index, in the same step. On a cluster (those keys live in other slots) the caller adds
-- them after the script.
local JOBS, PARKED, TENANT_RUNS, TENANT_THREADS = nil, nil, nil, nil
if #KEYS > 4 and KEYS[#KEYS - 3] == '""" + JOBS_STREAM + """' then
  JOBS, PARKED = KEYS[#KEYS - 3], KEYS[#KEYS - 2]
  TENANT_RUNS, TENANT_THREADS = KEYS[#KEYS - 1], KEYS[#KEYS]
end
local function set_queued(role, id)
  redis.call('HSET', rk(role, 1), 'status', '"queued"')
  if JOBS then
    redis.call('XADD', JOBS, '*', 'run', id)
    redis.call('ZREM', PARKED, id)
  end
end
-- a new run enters the tenant's index; with ``job``, it is dispatched too
local function index_new(role, id, job)
  if JOBS then
    redis.call('ZADD', TENANT_RUNS, redis.call('HGET', rk(role, 1), 'created_at'), id)
    if job then redis.call('XADD', JOBS, '*', 'run', id) end
  end
end
local function body_of(v) return string.match(v, '^[^\\t]*\\t(.*)$') end
local function check(expect_active, expect_next)
  if redis.call('EXISTS', T) == 0 then return 'gone' end
  local active = redis.call('HGET', T, 'active_run') or ''
  local nxt = redis.call('HGET', T, 'next_run') or ''
  if active ~= expect_active or nxt ~= expect_next then return 'stale' end
  return false
end
local function create_run(role, id, event, fstart, nfields, istart, ninputs)
  local fields = {}
  for j = fstart, fstart + nfields * 2 - 1 do fields[#fields + 1] = ARGV[j] end
  redis.call('HSET', rk(role, 1), unpack(fields))
  redis.call('XADD', rk(role, 2), '1-0', 't', 'run_created', 'd', event)
  for j = istart, istart + ninputs - 1 do redis.call('RPUSH', rk(role, 8), ARGV[j]) end
  redis.call('RPUSH', RUNS, id)
end
local function keep(ttl)
  if (redis.call('HGET', T, 'active_run') or '') == '' then
    for _, k in ipairs({T, MSGS, RUNS}) do redis.call('EXPIRE', k, ttl) end
  else
    for _, k in ipairs({T, MSGS, RUNS}) do redis.call('PERSIST', k) end
  end
end
"""

# KEYS thread, msgs, runs, A(8) ended run, N(8) waiting run, S(8) successor
#      (+ the dispatch keys on one node: jobs, parked index, the tenant's run, thread index)
# ARGV expected active, expected next, S id, now, ttl, channel, thread id, S run_created
#      data, n S fields, S field pairs
SETTLE = _PRELUDE + """
local bad = check(ARGV[1], ARGV[2])
if bad then return {bad, ''} end
local active, nxt = ARGV[1], ARGV[2]
if active == '' then return {'idle', ''} end
local status = redis.call('HGET', rk(0, 1), 'status')
if status and not terminal(status) then return {'busy', ''} end
local added = redis.call('LRANGE', rk(0, 3), 0, -1)
if #added == 0 then added = redis.call('LRANGE', rk(0, 8), 0, -1) end
for _, m in ipairs(added) do redis.call('RPUSH', MSGS, m) end
local left = {}
for _, i in ipairs({6, 4, 7, 5}) do
  for _, v in ipairs(redis.call('LRANGE', rk(0, i), 0, -1)) do left[#left + 1] = body_of(v) end
  redis.call('DEL', rk(0, i))
end
local start = ''
if nxt ~= '' then
  for j = #left, 1, -1 do redis.call('LPUSH', rk(1, 8), left[j]) end
  start = nxt
  index_new(1, start, true)
elseif #left > 0 and status then
  start = ARGV[3]
  create_run(2, start, ARGV[8], 10, tonumber(ARGV[9]), 1, 0)
  for _, m in ipairs(left) do redis.call('RPUSH', rk(2, 8), m) end
  index_new(2, start, true)
end
redis.call('HSET', T, 'active_run', start, 'next_run', '', 'updated_at', ARGV[4])
keep(ARGV[5])
notify(ARGV[6], ARGV[7], 'e:' .. ARGV[7])
return {'ok', start}
"""

# KEYS thread, msgs, runs, A(8) active run, N(8) waiting run, C(8) candidate, idem key
#      (+ the dispatch keys on one node: jobs, parked index, the tenant's run, thread index)
# ARGV expected active, expected next, tenant, policy, idem hash ('' none), ttl, now,
#      channel, thread id, C id, C run_created data, ts, n prompts, n C fields,
#      then the prompts (JSON), their message ids, the C field pairs, then n thread fields
#      and their pairs (n > 0: create the thread first if it does not exist), then the run
#      C replaces ('' none: a regenerate; its keys are A's, as the thread must be idle), then
#      the most messages a run may hold waiting ('' none).
# Returns {status, outcome, the parked active run an interrupt or steer woke ('' none)};
# status ``full`` (outcome: the run) when the prompts would take that run past the limit.
POST = _PRELUDE + """
local n, nf = tonumber(ARGV[13]), tonumber(ARGV[14])
local pstart, istart, fstart = 15, 15 + n, 15 + 2 * n
local tstart = fstart + 2 * nf
local nt = tonumber(ARGV[tstart] or '0')
local replaces = ARGV[tstart + 1 + nt * 2] or ''
local limit = tonumber(ARGV[tstart + 2 + nt * 2] or '')
if redis.call('EXISTS', T) == 0 and nt > 0 then
  local fields = {}
  for j = tstart + 1, tstart + nt * 2 do fields[#fields + 1] = ARGV[j] end
  redis.call('HSET', T, unpack(fields))
  if TENANT_THREADS then
    redis.call('ZADD', TENANT_THREADS, redis.call('HGET', T, 'created_at'), THREAD)
  end
end
if redis.call('EXISTS', T) == 0 or redis.call('HGET', T, 'tenant') ~= ARGV[3] then
  return {'gone', '', ''}
end
local IDEM = KEYS[28]
if ARGV[5] ~= '' then
  local seen = redis.call('GET', IDEM)
  if seen then return {'repeat', seen, ''} end
end
local bad = check(ARGV[1], ARGV[2])
if bad then return {bad, '', ''} end
local active, nxt, policy = ARGV[1], ARGV[2], ARGV[4]
if active ~= '' then
  local status = redis.call('HGET', rk(0, 1), 'status')
  if not status or terminal(status) then return {'ended', '', ''} end
end
local woken = ''
-- whatever stops or redirects the active run wakes it if it is parked (the caller adds its job)
local function wake_active()
  if redis.call('HGET', rk(0, 1), 'status') == '"requires_action"' then
    set_queued(0, active)
    woken = active
  end
end
local ids = {}
for j = istart, istart + n - 1 do ids[#ids + 1] = ARGV[j] end
ids = table.concat(ids, ',')
local names = {enqueue = 'queued', steer = 'steered', interrupt = 'interrupted'}
local outcome
local function start_candidate()
  create_run(2, ARGV[10], ARGV[11], fstart, nf, pstart, n)
  notify(ARGV[8], ARGV[9], 'e:' .. ARGV[9])
end
if active == '' then
  if replaces ~= '' then
    -- the thread's last run, its messages the tail of the history (ckpt, else its input)
    if redis.call('LINDEX', RUNS, -1) ~= replaces or redis.call('EXISTS', rk(0, 1)) == 0 then
      return {'not_last', replaces, ''}
    end
    local added = redis.call('LLEN', rk(0, 3))
    if added == 0 then added = redis.call('LLEN', rk(0, 8)) end
    local keep_n = redis.call('LLEN', MSGS) - added
    if keep_n > 0 then redis.call('LTRIM', MSGS, 0, keep_n - 1) else redis.call('DEL', MSGS) end
    redis.call('HSET', rk(0, 1), 'replaced_by', '"' .. ARGV[10] .. '"')
  end
  start_candidate()
  index_new(2, ARGV[10], true)
  redis.call('HSET', T, 'active_run', ARGV[10])
  outcome = 'started|' .. ARGV[10] .. '|00|' .. ids
elseif policy == 'reject' then
  return {'busy', active, ''}
elseif nxt ~= '' then
  if limit and redis.call('LLEN', rk(1, 8)) + n > limit then return {'full', nxt, ''} end
  for j = pstart, pstart + n - 1 do redis.call('RPUSH', rk(1, 8), ARGV[j]) end
  outcome = names[policy] .. '|' .. nxt .. '|10|' .. ids
elseif policy == 'interrupt' then
  redis.call('HSET', rk(0, 1), 'cancel', '1')
  notify(ARGV[8], active, 'c:' .. active)
  wake_active()
  start_candidate()
  index_new(2, ARGV[10], false)
  redis.call('HSET', T, 'next_run', ARGV[10])
  outcome = 'interrupted|' .. ARGV[10] .. '|00|' .. ids
else
  if limit and redis.call('LLEN', rk(0, 4)) + redis.call('LLEN', rk(0, 5)) + n > limit then
    return {'full', active, ''}
  end
  local kind, q = 'follow_up', rk(0, 5)
  if policy == 'steer' then kind, q = 'steer', rk(0, 4) end
  for j = 0, n - 1 do
    local id = ARGV[istart + j]
    redis.call('RPUSH', q, id .. '\\t' .. ARGV[pstart + j])
    local seq = redis.call('HINCRBY', rk(0, 1), 'last_seq', 1)
    local data = '{"seq":' .. seq .. ',"run_id":"' .. active .. '","ts":"' .. ARGV[12] ..
      '","type":"message_queued","message_id":"' .. id .. '","kind":"' .. kind ..
      '","depth":0}'
    redis.call('XADD', rk(0, 2), seq .. '-0', 't', 'message_queued', 'd', data)
    notify(ARGV[8], active, 'e:' .. active .. ':' .. seq .. ':' .. seq .. '\\n' ..
      seq .. '\\tmessage_queued\\t' .. data)
  end
  if policy == 'steer' then wake_active() end
  outcome = names[policy] .. '|' .. active .. '|11|' .. ids
end
redis.call('HSET', T, 'updated_at', ARGV[7])
if ARGV[5] ~= '' then redis.call('SET', IDEM, ARGV[5] .. '|' .. outcome, 'EX', ARGV[6]) end
keep(ARGV[6])
return {'ok', outcome, woken}
"""

# KEYS thread, msgs, runs, A(8) active run, N(8) waiting run
#      (+ the dispatch keys on one node: jobs, parked index, the tenant's run, thread index)
# ARGV expected active, expected next, channel, thread id, run ttl, now
# Returns {status, the parked active run it woke to end ('' none)}.
DELETE = _PRELUDE + """
local bad = check(ARGV[1], ARGV[2])
if bad then return {bad, ''} end
local woken = ''
if ARGV[1] ~= '' and redis.call('EXISTS', rk(0, 1)) == 1 then
  redis.call('HSET', rk(0, 1), 'cancel', '1')
  notify(ARGV[3], ARGV[1], 'c:' .. ARGV[1])
  if redis.call('HGET', rk(0, 1), 'status') == '"requires_action"' then
    set_queued(0, ARGV[1])
    woken = ARGV[1]
  end
end
if ARGV[2] ~= '' and redis.call('EXISTS', rk(1, 1)) == 1 then
  redis.call('HSET', rk(1, 1), 'status', '"cancelled"', 'stop_reason', '"aborted"',
             'error', '"the thread was deleted"', 'ended_at', ARGV[6])
  for i = 1, 8 do redis.call('EXPIRE', rk(1, i), ARGV[5]) end
end
redis.call('DEL', T, MSGS, RUNS)
notify(ARGV[3], ARGV[4], 'e:' .. ARGV[4])
return {'ok', woken}
"""
