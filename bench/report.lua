-- bench/report.lua — what bench/autograd.lua and bench/nn.lua share: their arguments, the
-- PyTorch baseline script run in the same process tree, and the table of rows with its csv.
--
--   local R = dofile(<bench dir> .. "/report.lua")
--   local args = R.args(arg, "build/bench_x.csv")      -- --python PATH, --csv PATH
--   local base = R.baseline(args, "torch_x.py", "5 10") -- {case = seconds} from its lines
--   R.print(rows, args.csv)
--
-- A row: {case, qlua = seconds, base = seconds or nil, value, unit, target, at_most, extra}:
-- met when value <= target (at_most) or >= target; raw = true when qlua and base are not
-- seconds (printed as they are, not as microseconds).
local R = {}

function R.args(argv, csv)
  local args = { csv = csv }
  local i = 1
  while i <= #argv do
    local a = argv[i]
    if (a == "--python" or a == "--csv") and argv[i + 1] then args[a:sub(3)] = argv[i + 1]; i = i + 2
    else io.stderr:write(argv[0] .. ": unknown argument " .. a .. "\n"); os.exit(2) end
  end
  return args
end

-- runs `python <bench dir>/script extra` when a Python with torch is there; its lines
-- `case,seconds` become the table it returns (empty without torch)
function R.baseline(args, script, extra)
  local py = args.python
  if not py then
    for _, c in ipairs({ "python3", "/usr/bin/python3" }) do
      if os.execute(c .. " -c 'import torch' >/dev/null 2>&1") == true then py = c; break end
    end
  end
  local base = {}
  local path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/" .. script
  if py then
    local pipe = io.popen(py .. " " .. path .. " " .. (extra or "") .. " 2>/dev/null")
    for line in pipe:lines() do
      local k, s = line:match("^([%w_]+),([%d%.eE+-]+)$")
      if k then base[k] = tonumber(s) end
    end
    pipe:close()
  end
  if next(base) == nil then
    print(arg[0] .. ": no PyTorch in this Python: the rows have no baseline")
  end
  return base
end

function R.print(rows, csv_path)
  local fmt = "%-20s %12s %12s %10s  %-22s %-10s %s"
  print(fmt:format("case", "qlua us", "base us", "value", "unit", "target", "status"))
  local csv = io.open(csv_path, "w")
  if csv then csv:write("case,qlua_seconds,baseline_seconds,value,unit,target,status\n") end
  for _, r in ipairs(rows) do
    local status = "n/a"
    if r.value and r.target then
      local ok = (r.at_most and r.value <= r.target) or (not r.at_most and r.value >= r.target)
      status = ok and "met" or "MISSED"
    elseif not r.value then status = "no baseline" end
    local target = r.target and ((r.at_most and "<= " or ">= ") .. r.target) or "-"
    local scale = r.raw and 1 or 1e6   -- raw: the numbers are not seconds (bytes, say)
    print(fmt:format(r.case, ("%.2f"):format(r.qlua * scale), r.base and ("%.2f"):format(r.base * scale) or "-",
      r.value and ("%.3f"):format(r.value) or "-", r.unit, target, status .. (r.extra and ("  " .. r.extra) or "")))
    if csv then
      csv:write(("%s,%.9g,%s,%s,%q,%s,%s\n"):format(r.case, r.qlua, r.base and ("%.9g"):format(r.base) or "",
        r.value and ("%.6g"):format(r.value) or "", r.unit, r.target or "", status))
    end
  end
  if csv then csv:close(); print(arg[0] .. ": table written to " .. csv_path) end
end

return R
