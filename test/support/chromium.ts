import { chromium, type BrowserContext } from 'playwright-core';

/** Debian's chromium, driven by playwright-core, offline: no first-run, sync, component updates or QUIC probes. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * How long a page may take to load, and a wait for it to settle: the tests assert what pages show, not how fast they
 * come, and under CI's load (three files at once against one dev server) a page can take longer than playwright's 30 s
 * default. Vitest's per-test timeout (120 s) still ends a page that never comes.
 */
const PAGE_TIMEOUT_MS = 100_000;

/**
 * A headless Chromium with a fresh profile in `profileDir` (the caller removes it). `bypassCSP` ignores the pages'
 * Content-Security-Policy, to see what a page would request without it.
 */
export async function launchChromium(
  profileDir: string,
  viewport?: { width: number; height: number },
  opts: { bypassCSP?: boolean } = {},
): Promise<BrowserContext> {
  const context = await chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
    bypassCSP: opts.bypassCSP ?? false,
    ...(viewport ? { viewport } : {}),
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  context.setDefaultTimeout(PAGE_TIMEOUT_MS);
  return context;
}
