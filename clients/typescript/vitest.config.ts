import { defineConfig } from "vitest/config";

// Each test file starts its own `chaosproxy serve` (a Python process): at most two
// files at once, and room for a start-up on a loaded machine.
export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    pool: "forks",
    maxWorkers: 2,
    testTimeout: 30_000,
    hookTimeout: 60_000,
  },
});
