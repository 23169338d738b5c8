import { randomBytes } from 'node:crypto';
import { isLoopbackName } from '../loopback';

/**
 * The admin page's doors: which Host names it answers without a token, its login sessions, the login attempt limit,
 * and how a request path is written to the log.
 */

/**
 * A Host header naming this loopback server: a loopback name and the port the request arrived on (a browser omits
 * port 80). Any other name means the browser was pointed here through someone's DNS (rebinding), so without a token
 * nothing else would stop a page on that name from reading the ledger.
 */
export function isLoopbackHost(host: string | undefined, localPort: number | undefined): boolean {
  const m = /^(\[[0-9a-f:.]+\]|[^:[\]]+)(?::(\d{1,5}))?$/i.exec(host ?? '');
  if (!m || localPort === undefined) return false;
  return isLoopbackName(m[1]) && Number(m[2] ?? 80) === localPort;
}

/** 12 hours: a working day signed in, after which the token is asked for again. */
export const DEFAULT_SESSION_MS = 12 * 3600_000;
/** At most this many live sessions: creating one beyond it drops the oldest. */
const MAX_SESSIONS = 1_000;

/**
 * Server-side login sessions: the cookie holds a random ID (256 bits), never the token or anything derived from it,
 * so a leaked cookie dies with its session, at logout, at expiry, or when the process restarts.
 */
export class Sessions {
  private readonly expiries = new Map<string, number>();
  constructor(
    readonly lifetimeMs = DEFAULT_SESSION_MS,
    private readonly clock: () => number = Date.now,
  ) {}

  create(): string {
    const now = this.clock();
    for (const [id, expires] of this.expiries) if (expires <= now) this.expiries.delete(id);
    while (this.expiries.size >= MAX_SESSIONS) this.expiries.delete(this.expiries.keys().next().value!);
    const id = randomBytes(32).toString('base64url');
    this.expiries.set(id, now + this.lifetimeMs);
    return id;
  }

  valid(id: string | undefined): boolean {
    const expires = id === undefined ? undefined : this.expiries.get(id);
    if (expires === undefined) return false;
    if (expires > this.clock()) return true;
    this.expiries.delete(id!);
    return false;
  }

  revoke(id: string | undefined): void {
    if (id !== undefined) this.expiries.delete(id);
  }
}

/** Failed logins one client address may make within the window before it is refused until the oldest ages out. */
export const LOGIN_FAILURES_ALLOWED = 5;
export const LOGIN_WINDOW_MS = 15 * 60_000;
/** Addresses remembered at most (each holds at most LOGIN_FAILURES_ALLOWED times): a flood cannot grow memory. */
const MAX_ADDRESSES = 10_000;

/** Failed login attempts per client address, in a sliding window. */
export class LoginAttempts {
  private readonly failures = new Map<string, number[]>();
  constructor(private readonly clock: () => number = Date.now) {}

  /** Seconds until this address may try again, or 0 when it may try now. */
  retryAfterSeconds(address: string): number {
    const recent = this.recent(address);
    if (recent.length < LOGIN_FAILURES_ALLOWED) return 0;
    return Math.max(1, Math.ceil((recent[0] + LOGIN_WINDOW_MS - this.clock()) / 1000));
  }

  fail(address: string): void {
    const recent = this.recent(address);
    recent.push(this.clock());
    this.failures.delete(address); // re-inserted last: the map's first key is the address that failed longest ago
    this.failures.set(address, recent.slice(-LOGIN_FAILURES_ALLOWED));
    while (this.failures.size > MAX_ADDRESSES) this.failures.delete(this.failures.keys().next().value!);
  }

  private recent(address: string): number[] {
    const since = this.clock() - LOGIN_WINDOW_MS;
    const recent = (this.failures.get(address) ?? []).filter((t) => t > since);
    if (recent.length === 0) this.failures.delete(address);
    return recent;
  }
}

/**
 * A request path as one printable log line: control, format, private-use and unassigned characters and separators
 * other than the space become \u{...} escapes, and a backslash is doubled so an escape cannot be forged.
 */
export const printablePath = (path: string): string =>
  path.replace(/[\\\p{Cc}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}]/gu, (ch) =>
    ch === '\\' ? '\\\\' : `\\u{${ch.codePointAt(0)!.toString(16).padStart(4, '0')}}`,
  );
