--[[
spec/helpers/output.lua — busted's own terminal output (utfTerminal on a terminal,
plainTerminal otherwise), with the pending tests summed up by reason instead of listed
one by one: on a machine without a GPU a few hundred GPU cases are pending for one reason,
and listing each buried the result. spec/run.lua makes it the default output; busted's
`-o utfTerminal` or `-o plainTerminal` lists every pending test again.

The summary is one line per reason, after busted's status line:
  pending: 279 x no GPU: qlua.gpu_count() == 0 (... no GPU available ...) [12 files]
A reason is the pending message without its "file:line:" prefix, or the pending's name
when it has no message (a `pending("...")` declaration).
]]
local term = require "term"

return function(options)
  local busted = require "busted"
  local isatty = io.type(io.stdout) == "file" and term.isatty(io.stdout)
  local stock = require("busted.outputHandlers." .. (isatty and "utfTerminal" or "plainTerminal"))(options)
  local held = {}

  -- Runs before the stock suite-end handler (priority 1 puts it first), which would print
  -- every entry of stock.pendings: they are taken away here and summed up below.
  busted.subscribe({ "suite", "end" }, function()
    held = stock.pendings
    stock.pendings = {}
    return nil, true
  end, { priority = 1 })

  -- Runs after it (appended): one line per reason, the most frequent first.
  busted.subscribe({ "suite", "end" }, function()
    local groups, order = {}, {}
    for _, p in ipairs(held) do
      local why = type(p.message) == "string" and p.message:gsub("^[^\n]-:%d+: ", "") or p.name
      why = tostring(why):gsub("%s+", " ")
      local g = groups[why]
      if not g then
        g = { why = why, n = 0, files = {}, nfiles = 0 }
        groups[why] = g
        order[#order + 1] = g
      end
      g.n = g.n + 1
      local trace = p.element and p.element.trace or p.trace
      local file = trace and trace.short_src or "?"
      if not g.files[file] then g.files[file] = true; g.nfiles = g.nfiles + 1 end
    end
    table.sort(order, function(a, b) return a.n > b.n or (a.n == b.n and a.why < b.why) end)
    for _, g in ipairs(order) do
      io.write(string.format("pending: %d x %s [%d file%s]\n", g.n, g.why, g.nfiles,
                             g.nfiles == 1 and "" or "s"))
    end
    io.flush()
    return nil, true
  end)

  return stock
end
