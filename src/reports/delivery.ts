import { isLoopbackName } from '../loopback';
import { createHmac } from 'node:crypto';
import { STATUS_CODES } from 'node:http';
import type pg from 'pg';
import { secretSetting } from '../config';
import { inTransaction } from '../db/pool';
import { deliveredAt, recordDelivery, tryLockMonthDelivery } from '../db/report-deliveries';
import { UserError } from '../errors';
import { sha256 } from '../hash';
import { displayUsd } from '../money';
import type { DeliveryOutcome, GeneratedReport } from './types';

/**
 * Posting the monthly report to a webhook (Slack incoming webhooks, or anything that takes the same JSON), once.
 *
 * Once: report_deliveries records every successful post. A month whose report was generated after the month ended is
 * posted once, ever; a month still under way is posted once per distinct report, so the final post still happens.
 * While a delivery runs it holds a per-month advisory lock, so two workflows for the same month never post twice.
 * The one gap left is a crash between the receiver's 200 and our commit, after which the post is retried under the
 * same webhook-id, which the receiver dedupes on.
 *
 * Every post is signed as Standard Webhooks do it (webhook-id, webhook-timestamp, webhook-signature), goes only to the
 * URL configured (redirects are refused: a 307 would re-post the body anywhere), and only over https unless the
 * receiver is on loopback. Nothing the receiver answers is kept: errors carry its status code and reason phrase.
 */

/** The receiver refused the payload (a 4xx other than 408/429): retrying the same request cannot help. */
export class WebhookRejectedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WebhookRejected';
  }
}

/** A webhook ready to post to: its URL and the key its deliveries are signed with. */
export interface Webhook {
  url: string;
  secret: Buffer;
}

/** Where a webhook's settings came from, for error messages: the variables a user sets. */
interface WebhookVariables {
  url: string;
  secret: string;
}

/**
 * The webhook URL, checked before any use: https, or http to a loopback receiver only. A bad one is never echoed in
 * full: its path (or query) is its secret, and the message ends up in workflow history and logs.
 */
export function parseWebhookUrl(url: string, variable = 'REPORT_WEBHOOK_URL'): URL {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (!parsed || !/^https?:$/.test(parsed.protocol) || !parsed.host) {
    throw new UserError(
      `${variable} is not an http(s) URL (its value is not shown: a webhook URL holds its secret); ` +
        'set it to the full URL your chat tool gave you, e.g. https://hooks.slack.com/services/..., or to an empty string to turn delivery off',
    );
  }
  if (parsed.protocol === 'http:' && !isLoopbackName(parsed.hostname)) {
    throw new UserError(
      `${variable} is ${webhookTarget(url)}/... over plain http (its path is not shown: it may hold a secret); ` +
        'deliveries carry the report and a signature, so they go over https only (http is allowed to a loopback receiver, ' +
        `e.g. http://127.0.0.1:8080/...): change it to https://${parsed.host}/...`,
    );
  }
  return parsed;
}

/**
 * A Standard Webhooks signing secret: `whsec_` and the base64 of 24 to 64 random bytes. Never echoed: it is a key.
 */
export function parseWebhookSecret(secret: string | undefined, v: WebhookVariables): Buffer {
  const fix = `set ${v.secret} to whsec_ and the base64 of 24 to 64 random bytes (e.g. \`echo whsec_$(openssl rand -base64 32)\`) and give the receiver the same secret`;
  if (!secret) throw new UserError(`${v.url} is set but ${v.secret} is not: every delivery is signed (Standard Webhooks); ${fix}`);
  const base64 = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : '';
  const key = Buffer.from(base64, 'base64');
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(base64) || key.length < 24 || key.length > 64) {
    throw new UserError(`${v.secret} is not a webhook signing secret (its value is not shown); ${fix}`);
  }
  return key;
}

/** A webhook from its URL and secret settings; undefined when the URL is empty (delivery off). */
export function readWebhook(url: string | undefined, secret: string | undefined, v: WebhookVariables): Webhook | undefined {
  if (!url) return undefined;
  parseWebhookUrl(url, v.url);
  return { url, secret: parseWebhookSecret(secret, v) };
}

/** The monthly report's webhook: REPORT_WEBHOOK_URL signed with REPORT_WEBHOOK_SECRET. */
export const reportWebhookFromEnv = (env: NodeJS.ProcessEnv = process.env): Webhook | undefined =>
  readWebhook(env.REPORT_WEBHOOK_URL, secretSetting('REPORT_WEBHOOK_SECRET', env), {
    url: 'REPORT_WEBHOOK_URL',
    secret: 'REPORT_WEBHOOK_SECRET',
  });

/** Budget threshold events' webhook: BUDGET_WEBHOOK_URL with BUDGET_WEBHOOK_SECRET, else the report's webhook. */
export const budgetWebhookFromEnv = (env: NodeJS.ProcessEnv = process.env): Webhook | undefined =>
  env.BUDGET_WEBHOOK_URL
    ? readWebhook(env.BUDGET_WEBHOOK_URL, secretSetting('BUDGET_WEBHOOK_SECRET', env), {
        url: 'BUDGET_WEBHOOK_URL',
        secret: 'BUDGET_WEBHOOK_SECRET',
      })
    : reportWebhookFromEnv(env);

/**
 * Standard Webhooks headers for one attempt: the id names the event (the same on every redelivery, so the receiver
 * dedupes on it), the timestamp the attempt, and the signature is `v1,` and the base64 HMAC-SHA256 of
 * `<id>.<timestamp>.<body>` under the secret.
 */
export function signatureHeaders(secret: Buffer, id: string, body: string, at = new Date()): Record<string, string> {
  const timestamp = String(Math.floor(at.getTime() / 1000));
  const signature = createHmac('sha256', secret).update(`${id}.${timestamp}.${body}`).digest('base64');
  return { 'webhook-id': id, 'webhook-timestamp': timestamp, 'webhook-signature': `v1,${signature}` };
}

/** A webhook-id from any stable event key: printable ASCII whatever the key holds (a user ID may be any text). */
export const webhookId = (eventKey: string): string => `msg_${sha256(eventKey).slice(0, 32)}`;

/** Scheme and host of a webhook URL, safe to print and store (a Slack webhook's path is its secret). */
export function webhookTarget(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}`;
  } catch {
    return '(invalid URL)';
  }
}

const mrkdwn = (s: string) => s.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/** A Slack-compatible message: `text` (the fallback and notification line) plus Block Kit blocks. */
export function slackPayload(g: GeneratedReport): { text: string; blocks: unknown[] } {
  const s = g.summary;
  const so = s.complete ? '' : ' (month so far)';
  const text = `cronledger usage report ${s.month}${so} (${s.timeZone}): total ${displayUsd(s.totalUsd)}, ${s.calls} model calls, ${s.completedRuns} completed runs`;
  const top = s.topUsers.length
    ? s.topUsers.map((u, i) => `${i + 1}. \`${mrkdwn(u.userId)}\` ${displayUsd(u.costUsd)}`).join('\n')
    : '_no usage this month_';
  return {
    text,
    blocks: [
      { type: 'header', text: { type: 'plain_text', text: `Usage report ${s.month}${so}`.slice(0, 150) } },
      {
        type: 'section',
        fields: [
          { type: 'mrkdwn', text: `*Total*\n${displayUsd(s.totalUsd)}` },
          { type: 'mrkdwn', text: `*Model calls*\n${s.calls}` },
          { type: 'mrkdwn', text: `*Cost per completed run*\n${displayUsd(s.costPerCompletedRunUsd)}` },
          { type: 'mrkdwn', text: `*Active users*\n${s.activeUsers}` },
          { type: 'mrkdwn', text: `*Failed calls*\n${s.failedCalls.calls} (${displayUsd(s.failedCalls.costUsd)})` },
          {
            type: 'mrkdwn',
            text: `*Duplicate-skipped runs*\n${s.duplicateSkippedRuns.runs} (${displayUsd(s.duplicateSkippedRuns.costUsd)})`,
          },
        ],
      },
      { type: 'section', text: { type: 'mrkdwn', text: `*Top users*\n${top}` } },
      {
        type: 'context',
        elements: [
          { type: 'mrkdwn', text: mrkdwn(`Time zone ${s.timeZone}. Artifacts: ${g.dir} (${g.files.map((f) => f.name).join(', ')})`) },
        ],
      },
    ],
  };
}

/**
 * POSTs JSON, signed, under `id`. Network errors, timeouts, 408, 429 and 5xx throw a retryable Error; a redirect and
 * other non-2xx a WebhookRejectedError. The response body is never read: a receiver's error page may echo the URL.
 */
export async function postJson(hook: Webhook, id: string, body: unknown, timeoutMs = 10_000): Promise<number> {
  const { url } = hook;
  parseWebhookUrl(url);
  const text = JSON.stringify(body);
  let response: Response;
  try {
    response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...signatureHeaders(hook.secret, id, text) },
      body: text,
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    // The error may quote the URL; only its scheme and host may be shown (the URL was parsed above, so its cause is
    // a network error, which names the host and port, never the path).
    throw new Error(`webhook ${webhookTarget(url)} unreachable: ${(err as Error).message.replaceAll(url, webhookTarget(url))}`, {
      cause: err,
    });
  }
  await response.body?.cancel().catch(() => undefined);
  if (response.ok) return response.status;
  // The standard reason phrase for the code, not the receiver's: nothing it sends back is repeated.
  const message = `webhook ${webhookTarget(url)} answered ${response.status} ${STATUS_CODES[response.status] ?? 'Unknown'}`;
  if (response.status >= 300 && response.status < 400) {
    throw new WebhookRejectedError(
      `${message}; redirects are not followed (they would re-post the delivery elsewhere): configure the final URL`,
    );
  }
  if (response.status === 408 || response.status === 429 || response.status >= 500) throw new Error(message);
  throw new WebhookRejectedError(message);
}

export interface DeliverRequest {
  webhook: Webhook;
  generated: Pick<GeneratedReport, 'month' | 'timeZone' | 'reportSha256' | 'dir' | 'files' | 'summary'>;
  workflowId?: string;
  attempt?: number;
  post?: typeof postJson;
}

/** Posts the report unless this month (or, for a month under way, this exact report) was delivered already. */
export async function deliverOnce(db: pg.Pool, req: DeliverRequest): Promise<DeliveryOutcome> {
  const { month, timeZone, reportSha256, summary } = req.generated;
  const complete = summary.complete;
  return inTransaction(db, async (tx) => {
    if (!(await tryLockMonthDelivery(tx, month))) throw new Error(`another delivery of ${month} is in progress; retrying`);
    const done = await deliveredAt(tx, { month, complete, reportSha256 });
    if (done) return { status: 'already-delivered', deliveredAt: done.toISOString() };
    // One id per report delivered: its retries and a post repeated after a crash share it.
    const id = webhookId(`report:${month}:${timeZone}:${reportSha256}`);
    const status = await (req.post ?? postJson)(req.webhook, id, slackPayload(req.generated as GeneratedReport));
    const target = webhookTarget(req.webhook.url);
    await recordDelivery(tx, {
      month,
      timeZone,
      complete,
      reportSha256,
      target,
      workflowId: req.workflowId ?? null,
      attempt: req.attempt ?? null,
      responseStatus: status,
    });
    return { status: 'posted', target, attempt: req.attempt ?? 1 };
  });
}
