"""Every Redis key the bot uses, declared once under one prefix, and the Lua scripts that
write them atomically. Plain data: :mod:`bot.storage.redis_store` (the only module that
imports ``redis``) registers the scripts and uses the keys.

Key layout (every key under one prefix, declared once in :class:`Keys`). The prefix
``{upgradebot}:`` is a Redis Cluster *hash tag*: every key hashes to the same slot, so each
Lua script and transaction touches one node and a managed Redis Cluster can hold them
(a version before 0.2 used ``upgradebot:``; :data:`OLD_PREFIX`, moved once at start)::

    {upgradebot}:run:<id>            hash  version, state, json (the Run), and part:<key> for each
                                           large progress value, kept apart, with its digest in
                                           digest:part:<key> (``RedisRunStore``: a save sends only
                                           the parts whose digest differs from these)
    {upgradebot}:runs                zset  every run id, scored by creation time
    {upgradebot}:runs:active         set   ids of runs not yet in a terminal state
    {upgradebot}:lock:<cluster/ns/ds> string  id of the run that holds the target
    {upgradebot}:lease:<id>          string  owner id of the worker on the run (PX ttl)
    {upgradebot}:audit:<id>          stream  the run's audit trail
    {upgradebot}:audit               stream  every run's audit trail (capped, approximately)
    {upgradebot}:once:<key>          string  idempotency claims (PX ttl)
    {upgradebot}:leader              string  owner id of the process running the report scheduler
                                           and the event collectors (PX ttl)
    {upgradebot}:leader:epoch        string  the leader lease's fencing token: a number, one more at
                                           each new holder (never less)
    {upgradebot}:scheduler:jobs      (retired: APScheduler's pickled jobs before 0.9; never read,
    {upgradebot}:scheduler:times      removed by the report scheduler's leader, logged)
    {upgradebot}:events:<id>         hash    a run's event collection: rv, tally (JSON), since,
                                           flushed_at, relists, watching
    {upgradebot}:events:<id>:seen    hash    event uid -> occurrences already counted (dedupe)
    {upgradebot}:report:<id>:<after> hash    a report's idempotency record: <where>:claim ("<token>
                                           <ms> <owner>", taken before each post), <where> (the
                                           message's ts once posted; where: thread, oncall),
                                           verdict, posted_at (every post recorded)
    {upgradebot}:effect:<id>:<key>   string  the claim on a Slack effect of a run's thread (its root, a
                                           step's or a gate's message, a gate's rewrite, an on-call
                                           notice): the claimer's owner id and mark (pid space, pid,
                                           start time: ``bot.liveness``; PX ttl), taken before the
                                           Slack call; the effect is recorded in the run's ``origin``
                                           under ``<key>`` (:data:`CLAIM_EFFECT`)
    {upgradebot}:quota:user:<id>     zset    slots of the long commands a user has running: a
    {upgradebot}:quota:channel:<id>  zset    token each, scored by when its lease ends (renewed while
                                           it runs; ``bot.workers.Quotas``)
    {upgradebot}:jobs:*              the job queue between serve and its workers (dramatiq's
                                           Redis broker under this namespace: ``bot/jobs.py``)

Creating a run (with its lock), and saving one (compare-and-set on ``version``, lease
fencing, the parts' digests compared, lock release when it ends, audit entries) are each one
Lua script (:data:`CREATE`, :data:`SAVE`), so they are atomic: no other client sees half of
one. A save names every part with its digest and sends the values of those it believes
changed; when Redis holds another digest for a part not sent, the script writes nothing and
answers ``need`` with those parts, and the store sends them.
"""
from __future__ import annotations

GLOBAL_AUDIT_MAXLEN = 100_000


PREFIX = "{upgradebot}:"
OLD_PREFIX = "upgradebot:"
"""The prefix before the hash tag: keys under it are renamed at start (``RedisRunStore.migrate_keys``)."""


class _Key:
    """A key made of parts: the template under :data:`PREFIX`, filled in by a call."""

    def __init__(self, template: str) -> None:
        self.template = template

    def __call__(self, *parts: str) -> str:
        return PREFIX + self.template.format(*parts)  # the prefix's braces are a hash tag, not a field


class Keys:
    """Every Redis key the bot uses, in one place, with one prefix."""

    prefix = PREFIX
    runs = PREFIX + "runs"
    active = PREFIX + "runs:active"
    audit = PREFIX + "audit"
    leader = PREFIX + "leader"
    leader_epoch = PREFIX + "leader:epoch"
    scheduler_jobs = PREFIX + "scheduler:jobs"
    scheduler_times = PREFIX + "scheduler:times"
    """APScheduler's job store before 0.9 (pickled jobs): never read, only removed."""
    run = _Key("run:{0}")
    lock = _Key("lock:{0}")
    lease = _Key("lease:{0}")
    run_audit = _Key("audit:{0}")
    once = _Key("once:{0}")
    events = _Key("events:{0}")
    seen = _Key("events:{0}:seen")
    report = _Key("report:{0}:{1}")
    quota = _Key("quota:{0}:{1}")
    effect = _Key("effect:{0}:{1}")


# Appends the audit entries given as ARGV[first..]: a count, then per entry a field count
# and its field/value pairs; each goes to the run's stream and the global one.
AUDIT_LUA = """
-- The parts given as ARGV[first..]: a count, then per part its field, its digest and '1' with
-- its value after it, or '0' (not sent: Redis must hold a part of that digest already).
-- Answers the fields not sent whose digest Redis does not hold (their values must be sent),
-- and the index after the parts.
local function missing_parts(run, first)
  local n = tonumber(ARGV[first])
  local i = first + 1
  local need = {}
  for _ = 1, n do
    if ARGV[i + 2] == '1' then
      i = i + 4
    else
      if redis.call('HGET', run, 'digest:' .. ARGV[i]) ~= ARGV[i + 1] then need[#need + 1] = ARGV[i] end
      i = i + 3
    end
  end
  return need, i
end

-- Writes the parts given as ARGV[first..] (as missing_parts reads them): each sent value with
-- its digest; every other part: field (and its digest) of the hash is deleted. Returns the
-- index after them.
local function write_parts(run, first)
  local n = tonumber(ARGV[first])
  local i = first + 1
  local kept = {}
  for _ = 1, n do
    kept[ARGV[i]] = true
    if ARGV[i + 2] == '1' then
      redis.call('HSET', run, ARGV[i], ARGV[i + 3], 'digest:' .. ARGV[i], ARGV[i + 1])
      i = i + 4
    else
      i = i + 3
    end
  end
  for _, field in ipairs(redis.call('HKEYS', run)) do
    local part = field
    if string.sub(field, 1, 7) == 'digest:' then part = string.sub(field, 8) end
    if string.sub(part, 1, 5) == 'part:' and not kept[part] then redis.call('HDEL', run, field) end
  end
  return i
end

local function append_audit(run_stream, global_stream, maxlen, first)
  local n = tonumber(ARGV[first])
  local i = first + 1
  for _ = 1, n do
    local count = tonumber(ARGV[i])
    local fields = {}
    for j = 1, count do fields[j] = ARGV[i + j] end
    redis.call('XADD', run_stream, '*', unpack(fields))
    redis.call('XADD', global_stream, 'MAXLEN', '~', maxlen, '*', unpack(fields))
    i = i + count + 1
  end
end
"""

# KEYS: run, lock, runs, active, run audit, global audit
# ARGV: id, json, state, score, maxlen, parts..., audit...
CREATE = AUDIT_LUA + """
local holder = redis.call('GET', KEYS[2])
if holder then return {'locked', holder} end
if redis.call('EXISTS', KEYS[1]) == 1 then return {'exists', ''} end
local need = missing_parts(KEYS[1], 6)
if #need > 0 then return {'need', unpack(need)} end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'version', 0, 'state', ARGV[3], 'json', ARGV[2])
redis.call('ZADD', KEYS[3], ARGV[4], ARGV[1])
redis.call('SADD', KEYS[4], ARGV[1])
append_audit(KEYS[5], KEYS[6], ARGV[5], write_parts(KEYS[1], 6))
return {'ok', ''}
"""

# KEYS: run, lock, active, lease, run audit, global audit
# ARGV: id, json, state, expected version, terminal (1|0|2: 2 = an ended run reopened, it takes
#       the target's lock again), lease owner ('' = none), maxlen, parts..., audit...
SAVE = AUDIT_LUA + """
local current = redis.call('HGET', KEYS[1], 'version')
if not current then return {'missing', ''} end
if ARGV[6] ~= '' then
  local holder = redis.call('GET', KEYS[4])
  if holder ~= ARGV[6] then return {'lease', holder or ''} end
end
if current ~= ARGV[4] then return {'stale', current} end
local need = missing_parts(KEYS[1], 8)
if #need > 0 then return {'need', unpack(need)} end
if ARGV[5] == '2' then
  local holder = redis.call('GET', KEYS[2])
  if holder and holder ~= ARGV[1] then return {'locked', holder} end
  redis.call('SET', KEYS[2], ARGV[1])
  redis.call('SADD', KEYS[3], ARGV[1])
end
redis.call('HSET', KEYS[1], 'version', tonumber(current) + 1, 'state', ARGV[3], 'json', ARGV[2])
if ARGV[5] == '1' then
  if redis.call('GET', KEYS[2]) == ARGV[1] then redis.call('DEL', KEYS[2]) end
  redis.call('SREM', KEYS[3], ARGV[1])
end
append_audit(KEYS[5], KEYS[6], ARGV[7], write_parts(KEYS[1], 8))
return {'ok', ''}
"""

# KEYS: lease; ARGV: owner, ttl ms
ACQUIRE = """
local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
if holder then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
"""

# KEYS: lease; ARGV: old owner, new owner, ttl ms
TAKE_OVER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""

# KEYS: lease; ARGV: owner
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


# KEYS: leader, events, seen; ARGV: owner, rv, tally, then counted pairs (n, uid, count...),
# forgotten uids (n, uid...), info pairs (n, field, value...)
SAVE_COLLECTION = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], 'rv', ARGV[2], 'tally', ARGV[3])
local i = 4
local n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do redis.call('HSET', KEYS[3], ARGV[i], ARGV[i + 1]); i = i + 2 end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do redis.call('HDEL', KEYS[3], ARGV[i]); i = i + 1 end
n = tonumber(ARGV[i]); i = i + 1
for _ = 1, n do redis.call('HSET', KEYS[2], ARGV[i], ARGV[i + 1]); i = i + 2 end
return 1
"""

# A key of ours holds a value of another type (written by something else): read as absent.
STRING_OF = """
local function string_of(key)
  local kind = redis.call('TYPE', key).ok
  if kind == 'none' then return nil, false end
  if kind ~= 'string' then return nil, true end
  return redis.call('GET', key), false
end
"""

# KEYS: leader, epoch; ARGV: owner, ttl ms
# Returns {token, note}: token 0 when another process holds the lease, else the fencing token
# (the epoch: one more than the last holder's whenever the holder changes); note names a
# key that held something foreign ('epoch', 'leader'), read as absent and overwritten.
ACQUIRE_LEADER = STRING_OF + """
local holder, odd_holder = string_of(KEYS[1])
local raw, odd_epoch = string_of(KEYS[2])
local epoch = tonumber(raw)
local note = ''
if odd_epoch or (raw and (not epoch or epoch < 0 or epoch > 2^50 or epoch ~= math.floor(epoch))) then
  epoch = nil
  note = 'epoch'
end
if holder == ARGV[1] and epoch then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {epoch, note}
end
if holder and holder ~= ARGV[1] and redis.call('PTTL', KEYS[1]) >= 0 then return {0, note} end
if odd_holder or (holder and holder ~= ARGV[1]) then note = note .. ' leader' end
epoch = (epoch or 0) + 1
redis.call('SET', KEYS[2], epoch)
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {epoch, note}
"""

# KEYS: leader, epoch, report; ARGV: owner, token, where, now ms, grace ms, lease ttl ms
# The claim on posting the report to <where>, taken with the leader's fencing token in the
# same script that checks it: 'stale' (the lease or its token is no longer ours: post
# nothing), 'posted' (<where> is recorded), 'pending' (claimed by this or a newer token, or
# by an older one less than grace ago: its holder may still post), 'foreign' (the record is
# not a hash), 'claimed' (ours to post now) or 'reclaimed' (ours: an older leader's claim,
# never recorded, taken over after grace). A claim renews the lease.
CLAIM_REPORT_POST = STRING_OF + """
local holder = string_of(KEYS[1])
local epoch = string_of(KEYS[2])
if holder ~= ARGV[1] or epoch ~= ARGV[2] then return 'stale' end
local kind = redis.call('TYPE', KEYS[3]).ok
if kind ~= 'hash' and kind ~= 'none' then return 'foreign' end
if redis.call('HEXISTS', KEYS[3], ARGV[3]) == 1 then return 'posted' end
local claim = redis.call('HGET', KEYS[3], ARGV[3] .. ':claim')
local outcome = 'claimed'
if claim then
  local token, at = string.match(claim, '^(%d+) (%d+) ')
  token, at = tonumber(token), tonumber(at)
  if token and at and (token >= tonumber(ARGV[2]) or at + tonumber(ARGV[5]) > tonumber(ARGV[4])) then
    return 'pending'
  end
  outcome = 'reclaimed'
end
redis.call('HSET', KEYS[3], ARGV[3] .. ':claim', ARGV[2] .. ' ' .. ARGV[4] .. ' ' .. ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[6])
return outcome
"""

# KEYS: report; ARGV: where, token, owner
# A post that failed (Slack answered, nothing was posted) gives its claim back.
RELEASE_REPORT_POST = """
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return 0 end
local claim = redis.call('HGET', KEYS[1], ARGV[1] .. ':claim')
if not claim or string.match(claim, '^(%d+) ') ~= ARGV[2] or string.sub(claim, -#ARGV[3] - 1) ~= ' ' .. ARGV[3] then
  return 0
end
return redis.call('HDEL', KEYS[1], ARGV[1] .. ':claim')
"""


# KEYS: the slot sets to hold one slot in each of (a user's, a channel's)
# ARGV: token, now (ms), lease end (ms), lease (ms), then the limit of each key
# Returns 0 (the slot is held in every set) or the index of the first full set (nothing held).
TAKE_SLOT = """
for i, key in ipairs(KEYS) do
  redis.call('ZREMRANGEBYSCORE', key, '-inf', ARGV[2])
  if redis.call('ZCARD', key) >= tonumber(ARGV[4 + i]) then return i end
end
for _, key in ipairs(KEYS) do
  redis.call('ZADD', key, ARGV[3], ARGV[1])
  redis.call('PEXPIRE', key, ARGV[4])
end
return 0
"""

# KEYS: the slot sets a token holds; ARGV: token, lease end (ms), lease (ms)
# Returns how many of them still held it (a slot another take has already cleared away is
# not taken again: its command runs on, uncounted, and the limit holds for the others).
RENEW_SLOT = """
local held = 0
for _, key in ipairs(KEYS) do
  if redis.call('ZSCORE', key, ARGV[1]) then
    redis.call('ZADD', key, 'XX', ARGV[2], ARGV[1])
    redis.call('PEXPIRE', key, ARGV[3])
    held = held + 1
  end
end
return held
"""


# KEYS: run, effect claim; ARGV: origin key, owner, ttl ms, dead holder ('' for none)
# The claim on one Slack effect of a run's thread, taken right before the Slack call in the
# script that checks it was not done: {'done', value} (the run's origin records it: value),
# {'held', owner} (claimed less than ttl ago and not recorded: its holder, another process
# or another thread of this one, may be doing it now), {'gone', ''} (no such run) or
# {'claimed', ''} (ours to do now; a claim whose ttl ran out, never recorded, is taken over,
# and so is one still held by the dead holder the caller names: bot.slack.claims).
CLAIM_EFFECT = """
local raw = redis.call('HGET', KEYS[1], 'json')
if not raw then return {'gone', ''} end
local ok, run = pcall(cjson.decode, raw)
if not ok or type(run) ~= 'table' then return {'gone', ''} end
local origin = run['origin']
if type(origin) == 'table' and type(origin[ARGV[1]]) == 'string' then return {'done', origin[ARGV[1]]} end
local holder = redis.call('GET', KEYS[2])
if holder and holder ~= ARGV[4] then return {'held', holder} end
redis.call('SET', KEYS[2], ARGV[2], 'PX', ARGV[3])
return {'claimed', ''}
"""
