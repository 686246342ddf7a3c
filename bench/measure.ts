// Benchmarks report ratios measured in one run, never absolute times compared to a constant.
export function measure(name: string, iterations: number, fn: () => void): number {
  for (let i = 0; i < Math.min(200, iterations); i++) fn(); // warm up
  const start = process.hrtime.bigint();
  for (let i = 0; i < iterations; i++) fn();
  const nsPerOp = Number(process.hrtime.bigint() - start) / iterations;
  console.log(`${name.padEnd(56)} ${(nsPerOp / 1000).toFixed(1).padStart(8)} µs/op`);
  return nsPerOp;
}
