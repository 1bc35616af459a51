-- cnn.lua — a small convolutional network learns which way a bar points: 32x32 images,
-- each one noisy bar through a random point, horizontal, vertical or on either diagonal
-- (four classes), drawn by qlua itself. The network is qlua.nn's: two blocks of Conv2d,
-- BatchNorm2d, ReLU and MaxPool2d, then AdaptiveAvgPool2d, Flatten and Linear, trained by
-- qlua.optim.AdamW on cross_entropy with autograd's gradients.
--   qlua samples/cnn.lua [train_images] [epochs]
-- It runs on the GPU when there is one, else on the CPU (in well under a minute there). It
-- checks itself and fails loudly: the loss falls, and the test accuracy reaches 95% (a
-- bar's direction is plain to see under this noise; chance is 25%).
package.path = (arg[0]:match("^(.*)/[^/]*$") or ".") .. "/../lua/?.lua;" .. package.path
local nn, optim = require "qlua.nn", require "qlua.optim"
local F = nn.functional

local dev = qlua.gpu_count() > 0 and "gpu" or "cpu"
local n_train = math.tointeger(tonumber(arg[1]) or 4096)
local epochs = math.tointeger(tonumber(arg[2]) or 3)
local n_test, S, B, C = 1024, 32, 64, 4
assert(n_train >= B, ("cnn: needs at least %d training images (one batch), got %d"):format(B, n_train))

qlua.seed(3)
-- the pixel grid, centred: columns x and rows y in -15.5 .. 15.5
local coords = qlua.arange(0, S, { dtype = "float32", device = dev }) - (S - 1) / 2
local gx, gy = coords:reshape({ 1, 1, S }), coords:reshape({ 1, S, 1 })

-- n images (n, 1, S, S) and their labels 1..4: a bar of half-length 9 and width ~1.5 at
-- angle (label - 1) * 45 degrees (+- 8), through a point within 6 pixels of the centre,
-- over Gaussian noise of sd 0.35
local function make_data(n)
  local y = qlua.randint(1, C, n, { device = dev })
  local angle = ((y - 1):float() * 45 + (qlua.rand(n, { device = dev }) - 0.5) * 16) * (math.pi / 180)
  local cx = ((qlua.rand(n, { device = dev }) - 0.5) * 12):reshape({ n, 1, 1 })
  local cy = ((qlua.rand(n, { device = dev }) - 0.5) * 12):reshape({ n, 1, 1 })
  local c, s = angle:cos():reshape({ n, 1, 1 }), angle:sin():reshape({ n, 1, 1 })
  local dx, dy = gx - cx, gy - cy
  local across = dx * s - dy * c                   -- distance from the bar's line
  local along = (dx * c + dy * s):abs()            -- distance along it from the point
  local bar = (across * across * -0.5):exp() * along:lt(9):float()
  local x = bar + qlua.randn({ n, S, S }, { device = dev }) * 0.35
  return x:reshape({ n, 1, S, S }), y
end
local x_train, y_train = make_data(n_train)
local x_test, y_test = make_data(n_test)

local function block(cin, cout)
  return nn.Conv2d(cin, cout, 3, { padding = 1, device = dev }), nn.BatchNorm2d(cout, { device = dev }),
         nn.ReLU(), nn.MaxPool2d(2)
end
local c1, b1, r1, p1 = block(1, 16)
local c2, b2, r2, p2 = block(16, 32)
local net = nn.Sequential(c1, b1, r1, p1, c2, b2, r2, p2, nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(32, C, { device = dev }))
local opt = optim.AdamW(net:parameters(), { lr = 0.01, weight_decay = 1e-4 })

local function accuracy(x, y)
  net:eval()
  local correct = qlua.no_grad(function()
    local right = 0
    for first = 1, x:size(1), 256 do
      local n = math.min(256, x:size(1) - first + 1)
      local _, pred = net(x:narrow(1, first, n)):max(2)
      right = right + pred:eq(y:narrow(1, first, n)):sum()
    end
    return right
  end)
  net:train()
  return correct / x:size(1)
end

print(("cnn: %d training images of %dx%d on %s, %d epochs of batch %d"):format(n_train, S, S, dev, epochs, B))
local t0, first_loss, last_loss = qlua.clock(), nil, nil
for epoch = 1, epochs do
  local order = qlua.randperm(n_train, { device = dev })
  local sum, steps = 0, 0
  for first = 1, n_train - B + 1, B do
    local idx = order:narrow(1, first, B)
    local loss = F.cross_entropy(net(x_train:index_select(1, idx)), y_train:index_select(1, idx))
    opt:zero_grad()
    loss:backward()
    opt:step()
    local l = loss:item()
    first_loss = first_loss or l
    sum, steps = sum + l, steps + 1
  end
  last_loss = sum / steps
  print(("  epoch %d: mean loss %.4f, test accuracy %.1f%%  (%.1f s)"):format(epoch, last_loss,
    100 * accuracy(x_test, y_test), qlua.clock() - t0))
end

local acc = accuracy(x_test, y_test)
assert(last_loss < first_loss * 0.5, ("cnn: the loss did not fall (%.4f -> %.4f)"):format(first_loss, last_loss))
assert(acc >= 0.95, ("cnn: test accuracy %.1f%%, expected at least 95%%"):format(100 * acc))
print(("cnn: test accuracy %.1f%% (at least 95%% expected), %.1f s"):format(100 * acc, qlua.clock() - t0))
