import { chromium, type BrowserContext } from 'playwright-core';

/** Debian's chromium, driven by playwright-core, offline: no first-run, sync, component updates or QUIC probes. */
export const CHROMIUM = '/usr/bin/chromium';

/** A headless Chromium with a fresh profile in `profileDir` (the caller removes it). */
export function launchChromium(profileDir: string, viewport?: { width: number; height: number }): Promise<BrowserContext> {
  return chromium.launchPersistentContext(profileDir, {
    executablePath: CHROMIUM,
    headless: true,
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
