import { chromium, type BrowserContext } from 'playwright-core';

/** Debian's chromium, driven by playwright-core, offline: no first-run, sync, component updates or QUIC probes. */
export const CHROMIUM = '/usr/bin/chromium';

/**
 * A headless Chromium with a fresh profile in `profileDir` (the caller removes it). `bypassCSP` ignores the pages'
 * Content-Security-Policy, to see what a page would request without it.
 */
export function launchChromium(
  profileDir: string,
  viewport?: { width: number; height: number },
  opts: { bypassCSP?: boolean } = {},
): Promise<BrowserContext> {
  return chromium.launchPersistentContext(profileDir, {
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
}
