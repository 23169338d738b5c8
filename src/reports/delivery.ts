import type pg from 'pg';
import { inTransaction } from '../db/pool';
import { deliveredAt, recordDelivery, tryLockMonthDelivery } from '../db/report-deliveries';
import { UserError } from '../errors';
import { displayUsd } from '../money';
import type { DeliveryOutcome, GeneratedReport } from './types';

/**
 * Posting the monthly report to a webhook (Slack incoming webhooks, or anything that takes the same JSON), once.
 *
 * Once: report_deliveries records every successful post. A month whose report was generated after the month ended is
 * posted once, ever; a month still under way is posted once per distinct report, so the final post still happens.
 * While a delivery runs it holds a per-month advisory lock, so two workflows for the same month never post twice.
 * The one gap left is a crash between the receiver's 200 and our commit, after which the post is retried: webhooks
 * offer no idempotency key, so at-least-once is the honest promise for that instant.
 */

/** The receiver refused the payload (a 4xx other than 408/429): retrying the same request cannot help. */
export class WebhookRejectedError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'WebhookRejected';
  }
}

/**
 * The webhook URL, checked before any use. A bad one is never echoed: its path (or query) is its secret, and the
 * message ends up in workflow history and logs.
 */
export function parseWebhookUrl(url: string): URL {
  let parsed: URL | undefined;
  try {
    parsed = new URL(url);
  } catch {
    parsed = undefined;
  }
  if (!parsed || !/^https?:$/.test(parsed.protocol) || !parsed.host) {
    throw new UserError(
      'REPORT_WEBHOOK_URL is not an http(s) URL (its value is not shown: a webhook URL holds its secret); ' +
        'set it to the full URL your chat tool gave you, e.g. https://hooks.slack.com/services/..., or to an empty string to turn delivery off',
    );
  }
  return parsed;
}

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

/** POSTs JSON. Network errors, timeouts, 408, 429 and 5xx throw a retryable Error; other non-2xx a WebhookRejectedError. */
export async function postJson(url: string, body: unknown, timeoutMs = 10_000): Promise<number> {
  parseWebhookUrl(url);
  let response: Response;
  try {
    response = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    });
  } catch (err) {
    // The error may quote the URL; only its scheme and host may be shown (the URL was parsed above, so its cause is
    // a network error, which names the host and port, never the path).
    throw new Error(`webhook ${webhookTarget(url)} unreachable: ${(err as Error).message.replaceAll(url, webhookTarget(url))}`, {
      cause: err,
    });
  }
  const detail = (await response.text().catch(() => '')).slice(0, 200);
  if (response.ok) return response.status;
  const message = `webhook ${webhookTarget(url)} answered ${response.status}${detail ? `: ${detail}` : ''}`;
  if (response.status === 408 || response.status === 429 || response.status >= 500) throw new Error(message);
  throw new WebhookRejectedError(message);
}

export interface DeliverRequest {
  url: string;
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
    const status = await (req.post ?? postJson)(req.url, slackPayload(req.generated as GeneratedReport));
    const target = webhookTarget(req.url);
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
