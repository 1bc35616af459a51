--[[
spec/run.lua — starts the busted runner inside qlua, so the specs run in the host exactly
as users' scripts do (the global `qlua`, the same package paths, the same C modules).

  build/qlua spec/run.lua [busted options] [spec files or directories]

This is what Debian's /usr/bin/busted does under lua5.4; the runner reads the global
`arg` (arg[1..] are busted's arguments, "spec" when none), exits non-zero through
os.exit when anything failed or errored, and returns normally when all passed.
]]

-- Test helpers and the Lua half of qlua live in ./lua (lua/qlua/*.lua); spec helpers
-- are found as spec.helpers.* through the default ./?.lua.
package.path = "./lua/?.lua;./lua/?/init.lua;" .. package.path

-- The default output is busted's, with the pending tests summed up by reason
-- (spec/helpers/output.lua); `-o utfTerminal` or `-o plainTerminal` lists each one.
require("busted.runner")({ standalone = false, output = "spec.helpers.output" })
