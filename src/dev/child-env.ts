/**
 * The environment of every process the local stack starts, by allow-list: a child gets the few variables any program
 * needs, the settings of its own job, and what the stack sets for it, never the rest of the caller's environment.
 * A shell that runs `dev up` often holds the owner's or the superuser's database URL, the roles' passwords, the admin
 * token and the model API keys; a worker must not see the first ones (nor DATABASE_OPERATOR_URL: the operator's role
 * writes credits, prices and budgets), the read-only admin page not the keys.
 */

/** Where programs and home are, locale, time zone, temp dir and trusted CAs: nothing secret, everything some tool needs. */
const EVERY_PROCESS = [
  'PATH',
  'HOME',
  'USER',
  'LOGNAME',
  'LANG',
  'LANGUAGE',
  'TZ',
  'TMPDIR',
  'SSL_CERT_FILE',
  'SSL_CERT_DIR',
  'NODE_EXTRA_CA_CERTS',
];
const LOCALE = /^LC_[A-Z]+$/;

/**
 * What a worker may take from the caller: its model provider and key, where reports and webhooks go, the payload keys
 * and its tuning.
 * The database URL, Temporal's address and the worker's identity are set by the stack (src/dev/workers.ts).
 */
export const WORKER_INHERITS = [
  'MODEL_PROVIDER',
  'OPENAI_API_KEY',
  'OPENAI_API_KEY_FILE',
  'OPENAI_BASE_URL',
  'ANTHROPIC_API_KEY',
  'ANTHROPIC_API_KEY_FILE',
  'ANTHROPIC_BASE_URL',
  'ANTHROPIC_STREAM',
  'REPORT_WEBHOOK_URL',
  'REPORT_WEBHOOK_SECRET',
  'REPORT_WEBHOOK_SECRET_FILE',
  'BUDGET_WEBHOOK_URL',
  'BUDGET_WEBHOOK_SECRET',
  'BUDGET_WEBHOOK_SECRET_FILE',
  'CRONLEDGER_REPORTS_DIR',
  'CRONLEDGER_RESERVATION_EXPIRY_SECONDS',
  'CRONLEDGER_BUDGET_EVENT_RETRY_SECONDS',
  'CRONLEDGER_BUDGET_WAIT_MAX',
  'CRONLEDGER_WORKFLOW_BUNDLE',
  'CRONLEDGER_PAYLOAD_KEYS',
  'CRONLEDGER_PAYLOAD_KEYS_FILE',
  'NODE_ENV',
] as const;

/**
 * What the admin page may take from the caller: its token, its metrics labels and the payload keys its codec endpoint
 * decodes with. The read-only role's URL is set by the stack.
 */
export const ADMIN_INHERITS = [
  'CRONLEDGER_ADMIN_TOKEN',
  'CRONLEDGER_ADMIN_TOKEN_FILE',
  'CRONLEDGER_METRICS_PER_USER',
  'CRONLEDGER_PAYLOAD_KEYS',
  'CRONLEDGER_PAYLOAD_KEYS_FILE',
  'NODE_ENV',
] as const;

/**
 * The environment for a child: the variables every process needs and those in `inherits`, taken from `from` when
 * set there, then `set` on top (undefined values left out).
 */
export function childEnvironment(
  inherits: readonly string[],
  set: Record<string, string | undefined> = {},
  from: NodeJS.ProcessEnv = process.env,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(from)) {
    if (value !== undefined && (EVERY_PROCESS.includes(name) || LOCALE.test(name) || inherits.includes(name))) env[name] = value;
  }
  for (const [name, value] of Object.entries(set)) if (value !== undefined) env[name] = value;
  return env;
}
