-- bench/graph.lua — `make bench`, the CUDA graphs part (issue 27's targets): what a replay
-- costs per captured kernel, what capturing costs, and an epoch of samples/classifier.lua's
-- training step captured once and replayed, against PyTorch's CUDA graph of the same step
-- (bench/torch_graph.py) in the same run.
--
--   qlua bench/graph.lua [--python PATH] [--csv build/bench_graph.csv]
--
-- Cases (on a GPU; without one the script says so and prints nothing else):
--   replay_add100        a captured chain of 100 16-element adds: seconds per captured kernel
--                        of a replay, target <= 1.0 us
--   capture_classifier   capture + instantiate of the classifier's step (forward, autograd
--                        backward, SGD momentum): target <= 50 ms
--   epoch_graph          781 replays of that step (batches picked by copy_ into the graph's
--                        index input), against PyTorch's torch.cuda.graph replay of the
--                        same step: target <= 1x PyTorch's time
--   epoch_eager          the same epoch run eagerly (no target: what the graph saves)
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local nn, optim = require "qlua.nn", require "qlua.optim"
local F = nn.functional

local R = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/report.lua")
local args = R.args(arg, "build/bench_graph.csv")
if qlua.gpu_count() == 0 then
  print("bench/graph.lua: no GPU, no CUDA graph cases")
  return
end

local rows = {}
local function row(r) rows[#rows + 1] = r end
local function median(t)
  table.sort(t)
  return t[(#t + 1) // 2]
end

-- ---------------------------------------------------------------- replay cost
do
  local a = qlua.rand(16, { device = "gpu" })
  local b = qlua.rand(16, { device = "gpu" })
  local g = qlua.graph({ warmup = 1 }, function(x, y)
    for _ = 1, 100 do x:add_(y) end
    return x
  end, a, b)
  local t = qlua.bench(function() g:replay() end, { calls = 200, runs = 7, warmup = 1 }).median
  g:free()
  row({ case = "replay_add100", qlua = t / 100, value = t / 100 * 1e6, unit = "us per kernel",
        target = 1.0, at_most = true })
end

-- ---------------------------------------------------------------- the classifier's step
local D, H, C, B, N = 32, 128, 10, 256, 781
qlua.seed(7)
local x = qlua.randn({ N * B, D }, { device = "gpu" })
local y = qlua.randint(1, C, N * B, { device = "gpu" })
local order = qlua.randperm(N * B, { device = "gpu" })

local function new_step()
  qlua.seed(11)
  local net = nn.Sequential(nn.Linear(D, H, { device = "gpu" }), nn.ReLU(), nn.Linear(H, C, { device = "gpu" }))
  local opt = optim.SGD(net:parameters(), { lr = 0.05, momentum = 0.9 })
  local function step(idx)
    opt:zero_grad()
    local loss = F.cross_entropy(net(x:index_select(1, idx)), y:index_select(1, idx))
    loss:backward()
    opt:step()
    return loss
  end
  return step, net
end

local function epoch_eager(step)
  for i = 0, N - 1 do step(order:narrow(1, i * B + 1, B)) end
end

-- capture (after one eager warm-up step, as PyTorch's recipe has it), timed to the end of
-- instantiation
local captures = {}
local graph_step, graph_idx
for r = 1, 5 do
  local step = new_step()
  local idx = order:narrow(1, 1, B):clone()
  step(idx)
  qlua.sync()
  local t0 = qlua.clock()
  local g = qlua.graph(step, idx)
  local t1 = qlua.clock()
  captures[#captures + 1] = t1 - t0
  if r == 5 then graph_step, graph_idx = g, idx else g:free() end
end

local function epoch_graph()
  for i = 0, N - 1 do
    graph_idx:copy_(order:narrow(1, i * B + 1, B))
    graph_step:replay()
  end
end

local eager_step = new_step()
epoch_eager(eager_step)
local t_eager = qlua.bench(function() epoch_eager(eager_step) end, { calls = 1, runs = 5, warmup = 1 }).median
local t_graph = qlua.bench(epoch_graph, { calls = 1, runs = 7, warmup = 1 }).median

local base = R.baseline(args, "torch_graph.py", tostring(N))
row({ case = "capture_classifier", qlua = median(captures), value = median(captures) * 1e3,
      unit = "ms", target = 50, at_most = true })
local tg = base.epoch_graph
row({ case = "epoch_graph", qlua = t_graph, base = tg, value = tg and t_graph / tg,
      unit = "x PyTorch graph time", target = 1.0, at_most = true,
      extra = ("qlua %.1f ms/epoch%s"):format(t_graph * 1e3,
        tg and (", PyTorch graph %.1f ms"):format(tg * 1e3) or "") })
local te = base.epoch_eager
row({ case = "epoch_eager", qlua = t_eager, base = te, value = te and t_eager / te,
      unit = "x PyTorch eager time", at_most = true,
      extra = ("qlua eager %.1f ms/epoch, %.1fx its graph%s"):format(t_eager * 1e3, t_eager / t_graph,
        te and (", PyTorch eager %.1f ms"):format(te * 1e3) or "") })
graph_step:free()
R.print(rows, args.csv)
