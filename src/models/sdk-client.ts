import { UserError } from '../errors';
import { ProviderRejectedError, ProviderUnavailableError } from './provider';

/**
 * What an official provider SDK client is built with: its key and endpoint (the caller reads them, under their own
 * names), no retries of its own (Temporal owns retries, so each activity attempt is exactly one request and each billed
 * answer one ledger row), and a timeout below the model-call activity's 2-minute startToCloseTimeout.
 */
export function sdkClientOptions(
  settings: { apiKey: string | undefined; baseURL: string | undefined },
  defaultBaseURL: string,
  missingKey: string,
) {
  if (!settings.apiKey) throw new UserError(missingKey);
  return { apiKey: settings.apiKey, baseURL: settings.baseURL || defaultBaseURL, maxRetries: 0, timeout: 90_000 };
}

/**
 * How long a refusing provider asks to be left alone: retry-after-ms (OpenAI's own), else Retry-After in seconds or as
 * an HTTP date; null when absent or unreadable. The activity hands it to Temporal as the next retry's delay.
 */
export function retryAfterMs(headers: Headers | undefined, now = Date.now()): number | null {
  const ms = headers?.get('retry-after-ms');
  if (ms && /^\d+(\.\d+)?$/.test(ms)) return Math.ceil(Number(ms));
  const value = headers?.get('retry-after');
  if (!value) return null;
  if (/^\d+$/.test(value)) return Number(value) * 1000;
  const at = Date.parse(value);
  return Number.isNaN(at) ? null : Math.max(0, at - now);
}

/** The error classes of an official (Stainless-generated) provider SDK that say why a request got no answer. */
export interface SdkErrorClasses {
  APIUserAbortError: abstract new (...args: never[]) => Error;
  APIConnectionError: abstract new (...args: never[]) => Error;
  APIError: abstract new (...args: never[]) => Error & { status?: number; headers?: Headers };
}

/**
 * Sorts an SDK error into retry-worthy (408, 409, 429, 5xx, a connection error or timeout: ProviderUnavailableError
 * with the server's Retry-After) or final (other 4xx: ProviderRejectedError). Nothing was billed for either. An abort
 * by the caller, and anything else, is thrown as it is.
 */
export function refusal(provider: string, sdk: SdkErrorClasses, err: unknown): never {
  if (err instanceof sdk.APIUserAbortError) throw err;
  if (err instanceof sdk.APIConnectionError) throw new ProviderUnavailableError(`${provider} unreachable: ${err.message}`, null, null);
  if (err instanceof sdk.APIError) {
    const status = err.status ?? null;
    const message = `${provider} answered ${status ?? 'an error'}: ${err.message}`;
    if (status !== null && status >= 400 && status < 500 && ![408, 409, 429].includes(status)) {
      throw new ProviderRejectedError(message, status);
    }
    throw new ProviderUnavailableError(message, status, retryAfterMs(err.headers));
  }
  throw err;
}
