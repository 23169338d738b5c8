import { UserError } from '../errors';
import { sha256 } from '../hash';
import { readInputFile, type InputFileKind } from '../input-file';
import { parseKeepingNumberText } from '../json-number-text';

/**
 * The pages a reconciliation reads: from the provider's admin API, following `has_more`/`next_page` to the last page,
 * or from files of pages saved earlier (`--file`, for an operator without network access). Each page is parsed with
 * its numbers kept as decimal text, and the hash of all the pages read, in order, identifies the import.
 */
export interface ReportRequest {
  url: string;
  query: [string, string][];
}

export interface ReadPage {
  /** Where the page came from, as messages name it: a URL and page number, or a file. */
  where: string;
  page: unknown;
  text: string;
}

/** At most this many pages per report: a provider that never says has_more: false is not followed for ever. */
const MAX_PAGES = 1000;

export const REPORT_PAGES_FILE: InputFileKind = {
  name: 'report pages file',
  maxBytes: 64 * 1024 * 1024,
  fix: 'save fewer days per file and give several --file',
};

export async function fetchPages(request: ReportRequest, headers: Record<string, string>, keyName: string): Promise<ReadPage[]> {
  const pages: ReadPage[] = [];
  let next: string | null = null;
  do {
    const url = new URL(request.url);
    for (const [k, v] of request.query) url.searchParams.append(k, v);
    if (next !== null) url.searchParams.set('page', next);
    const where = `${request.url} page ${pages.length + 1}`;
    let response: Response;
    try {
      response = await fetch(url, { headers });
    } catch (err) {
      throw new UserError(`cannot reach ${request.url} (${(err as Error).message}); check the network or read saved pages with --file`);
    }
    const text = await response.text();
    if (response.status === 401 || response.status === 403) {
      throw new UserError(`${where} answered ${response.status}: ${keyName} is not an admin key of the organization (${brief(text)})`);
    }
    if (!response.ok) throw new UserError(`${where} answered ${response.status}: ${brief(text)}; nothing was written`);
    const page = parsePage(text, where);
    pages.push({ where, page, text });
    const { has_more: hasMore, next_page: nextPage } = page as { has_more?: unknown; next_page?: unknown };
    next = hasMore === true && typeof nextPage === 'string' ? nextPage : null;
    if (hasMore === true && next === null) throw new UserError(`${where} says has_more but gives no next_page; nothing was written`);
  } while (next !== null && pages.length < MAX_PAGES);
  if (next !== null) throw new UserError(`${request.url} still had more after ${MAX_PAGES} pages; reconcile fewer days at a time`);
  return pages;
}

/** A file holds one page as the API sent it, or a JSON array of pages. */
export function readPageFile(path: string): ReadPage[] {
  const text = readInputFile(path, REPORT_PAGES_FILE);
  const parsed = parsePage(text, `--file ${path}`);
  if (!Array.isArray(parsed)) return [{ where: `--file ${path}`, page: parsed, text }];
  return parsed.map((page, i) => ({ where: `--file ${path} page ${i + 1}`, page: page as unknown, text: i === 0 ? text : '' }));
}

function parsePage(text: string, where: string): unknown {
  try {
    return parseKeepingNumberText(text);
  } catch (err) {
    throw new UserError(`${where} is not JSON (${(err as Error).message}); give a page as the API sent it; nothing was written`);
  }
}

/** The hash of the pages' texts in the order read. */
export const pagesHash = (pages: ReadPage[]): string => sha256(pages.map((p) => p.text).join('\n'));

const brief = (text: string): string => text.replace(/\s+/g, ' ').slice(0, 200);
