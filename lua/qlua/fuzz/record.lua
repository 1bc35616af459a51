-- qlua.fuzz.record — where each tensor of a fuzzing run came from, and the reproducer
-- scripts made from that: every tensor is registered with the call that made it (and,
-- for views, the tensor whose storage it shares); calls that free or write into a storage
-- are its events. A finding's reproducer replays the calls that made the tensors it uses.

return function(ctx)
  local INF, is_tensor = ctx.INF, ctx.is_tensor

  -- ------------------------------------------------------------- provenance of tensors
  -- rec = { id, label, made = callrec, root = rec, events = {callrec...} }
  -- callrec = { seq, text, refs = {rec...} }
  local info = setmetatable({}, { __mode = "k" })   -- tensor -> rec
  local next_id = 0

  -- Named junk objects the reproducer defines before using them.
  local named, named_defs = {}, {}
  local function name_object(obj, name, def)
    named[obj] = name
    named_defs[name] = def
    return obj
  end

  -- Lua source for a value; tensors by label, collecting their recs in refs.
  local fmt
  local function fmt_number(x)
    if math.type(x) == "integer" then
      if x == math.mininteger then return "math.mininteger" end
      return string.format("%d", x)
    end
    if x ~= x then return "(0/0)" end
    if x == INF then return "math.huge" end
    if x == -INF then return "-math.huge" end
    if x == 0 and 1 / x < 0 then return "-0.0" end
    local s = string.format("%.17g", x)
    if not s:find("[%.eEn]") then s = s .. ".0" end
    return s
  end
  function fmt(v, refs, depth)
    local tv = type(v)
    if tv == "nil" or tv == "boolean" then return tostring(v) end
    if tv == "number" then return fmt_number(v) end
    if named[v] then refs.named = refs.named or {}; refs.named[named[v]] = true; return named[v] end
    if tv == "string" then
      if #v > 24 and v == v:sub(1, 1):rep(#v) then
        return string.format("(%q):rep(%d)", v:sub(1, 1), #v)
      end
      return (string.format("%q", v):gsub("\\\n", "\\n"))
    end
    if tv == "userdata" then
      local rec = info[v]
      if rec then refs[#refs + 1] = rec; return rec.label end
      if is_tensor(v) then return "<unregistered tensor>" end
      return "<userdata>"
    end
    if tv == "table" then
      depth = (depth or 0) + 1
      if depth > 6 then return "{...}" end
      local parts, n = {}, #v
      for i = 1, n do parts[#parts + 1] = fmt(v[i], refs, depth) end
      local keys = {}
      for k in pairs(v) do
        if not (math.type(k) == "integer" and k >= 1 and k <= n) then keys[#keys + 1] = k end
      end
      table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
      for _, k in ipairs(keys) do
        local key = (type(k) == "string" and k:match("^[%a_][%w_]*$")) and k
                    or ("[" .. fmt(k, refs, depth) .. "]")
        parts[#parts + 1] = key .. " = " .. fmt(v[k], refs, depth)
      end
      return "{" .. table.concat(parts, ", ") .. "}"
    end
    return "<" .. tv .. ">"
  end

  local function fmt_args(args, from, refs)
    local parts = {}
    for i = from, args.n do parts[#parts + 1] = fmt(args[i], refs) end
    return table.concat(parts, ", ")
  end

  local function register(t, callrec, k, nres, parent_rec, shares)
    if info[t] then return info[t] end
    next_id = next_id + 1
    local rec = { id = next_id, label = "T" .. next_id, events = {} }
    local text = callrec.text
    if nres > 1 then text = string.format("select(%d, %s)", k, text) end
    rec.made = { seq = callrec.seq, no = callrec.no, text = rec.label .. " = " .. text,
                 refs = callrec.refs }
    rec.root = (shares and parent_rec) and parent_rec.root or rec
    info[t] = rec
    return rec
  end

  local function add_event(t, callrec)
    local rec = info[t]
    if not rec then return end
    local ev = rec.root.events
    ev[#ev + 1] = callrec
    if #ev > 12 then table.remove(ev, 1) end
  end

  -- The reproducer: the calls that made the tensors a call uses (transitively) and the
  -- state changes (free, in-place writes) of their storages, in the order they ran.
  local function reproducer(callrec)
    local seen, lines = {}, {}
    local line_seen = {}
    local named_used = {}
    local function add_line(cr, text)
      if line_seen[cr] then return end
      line_seen[cr] = true
      lines[#lines + 1] = { seq = cr.seq, no = cr.no, text = text or cr.text, expr = cr.expr }
      if cr.refs.named then for k in pairs(cr.refs.named) do named_used[k] = true end end
    end
    local function add_rec(rec)
      if seen[rec] or #lines > 200 then return end
      seen[rec] = true
      add_line(rec.made, rec.made.text)
      for _, r in ipairs(rec.made.refs) do add_rec(r) end
      add_rec(rec.root)
      for _, ev in ipairs(rec.root.events) do
        add_line(ev)
        for _, r in ipairs(ev.refs) do add_rec(r) end
      end
    end
    for _, r in ipairs(callrec.refs) do add_rec(r) end
    if callrec.refs.named then for k in pairs(callrec.refs.named) do named_used[k] = true end end
    table.sort(lines, function(a, b) return a.no < b.no end)
    local text = {}
    local names = {}
    for k in pairs(named_used) do names[#names + 1] = k end
    table.sort(names)
    for _, k in ipairs(names) do text[#text + 1] = "local " .. k .. " = " .. named_defs[k] end
    local first = math.max(1, #lines - 40)
    if first > 1 then text[#text + 1] = string.format("-- (%d earlier lines left out)", first - 1) end
    for i = first, #lines do
      local l = lines[i].text
      if l:match("^T%d+ = ") then l = "local " .. l
      elseif lines[i].expr then l = "local _ = " .. l end
      text[#text + 1] = l .. "   -- call " .. lines[i].seq
    end
    text[#text + 1] = (callrec.expr and "local _ = " or "") .. callrec.text .. "   -- call "
                      .. callrec.seq .. " (the finding)"
    return table.concat(text, "\n")
  end

  ctx.info, ctx.name_object, ctx.fmt, ctx.fmt_args = info, name_object, fmt, fmt_args
  ctx.register, ctx.add_event, ctx.reproducer = register, add_event, reproducer
end
