/** Polls until check() is true. A deadline only turns a hang into a clear failure; nothing is timed. */
export async function waitFor(check: () => Promise<boolean>, timeoutMs: number, what = 'condition'): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`${what} not met within ${timeoutMs} ms`);
    await new Promise((r) => setTimeout(r, 250));
  }
}
