import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * Every relative link in the prose (README.md, BENCHMARKS.md, docs/ and bench/) names a file or folder that exists, and
 * a `#anchor` into a Markdown file names one of its headings; so does every repository path the prose names outside a
 * code block (`src/db/pool.ts`, test/unit/). Pure file reading: no server.
 */
const ROOT = resolve(import.meta.dirname, '..', '..');

function markdownFiles(): string[] {
  const files = ['README.md', 'BENCHMARKS.md'].map((f) => join(ROOT, f)).filter((f) => existsSync(f));
  const walk = (dir: string): void => {
    if (!existsSync(dir)) return;
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (name.endsWith('.md')) files.push(path);
    }
  };
  walk(join(ROOT, 'docs'));
  walk(join(ROOT, 'bench'));
  return files;
}

/** The text outside fenced code blocks and inline code, where a link is a link. */
const proseOf = (text: string): string => text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, '');

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens, repeats numbered. */
function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const line of text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').split('\n')) {
    const heading = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!heading) continue;
    const base = heading[1]
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/\s/g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** The links of one Markdown file that point at nothing, as `target (why)`. */
function brokenLinks(file: string, text: string): string[] {
  const broken: string[] = [];
  for (const match of proseOf(text).matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const target = match[1];
    if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
    const [pathPart, anchor] = target.split('#', 2) as [string, string | undefined];
    const path = pathPart === '' ? file : resolve(dirname(file), decodeURIComponent(pathPart));
    if (!existsSync(path)) {
      broken.push(`${target} (no such file: ${relative(ROOT, path)})`);
      continue;
    }
    const headings = (): Set<string> => anchorsOf(pathPart === '' ? text : readFileSync(path, 'utf8'));
    if (anchor !== undefined && path.endsWith('.md') && !headings().has(anchor)) {
      broken.push(`${target} (no heading #${anchor} in ${relative(ROOT, path)})`);
    }
  }
  return broken;
}

/** Top-level folders whose paths the prose names as plain text or inline code. */
const REPO_FOLDERS = ['src', 'test', 'bench', 'migrations', 'deploy', 'scripts', 'prices', 'examples', 'db', 'docs', 'prometheus'];
const NAMED_PATH = new RegExp(`(?<![\\w./<-])(?:${REPO_FOLDERS.join('|')})/[\\w./-]*`, 'g');

/**
 * The repository paths named outside code blocks (relative to the repository's root) that name nothing. A path that
 * goes on with a pattern or a placeholder (`test/fault/*.test.ts`, `docs/<page>`) is not a path, and is skipped.
 */
function missingNamedPaths(text: string): string[] {
  const outsideBlocks = text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '');
  const missing: string[] = [];
  for (const match of outsideBlocks.matchAll(NAMED_PATH)) {
    const next = outsideBlocks[match.index + match[0].length] ?? '';
    if ('*<{'.includes(next) && next !== '') continue;
    const path = match[0].replace(/[.,]+$/, '');
    if (!existsSync(join(ROOT, path))) missing.push(path);
  }
  return [...new Set(missing)];
}

describe('links in the docs', () => {
  const files = markdownFiles();

  it('finds the prose to check', () => {
    expect(files.map((f) => relative(ROOT, f))).toEqual(expect.arrayContaining(['README.md', 'BENCHMARKS.md']));
  });

  it.each(files.map((f) => [relative(ROOT, f), f]))('%s: every relative link resolves', (_name, file) => {
    expect(brokenLinks(file, readFileSync(file, 'utf8'))).toEqual([]);
  });

  it.each(files.map((f) => [relative(ROOT, f), f]))('%s: every repository path it names exists', (_name, file) => {
    expect(missingNamedPaths(readFileSync(file, 'utf8'))).toEqual([]);
  });

  it('reports a named path that is gone, and skips patterns, placeholders and code blocks', () => {
    const text = [
      'See src/db/pool.ts, `test/unit/` and `src/nowhere.ts`; also bench/gone.ts.',
      'Patterns: `test/fault/*.test.ts`, docs/<page>.md, a URL https://example.com/src/nowhere.ts.',
      '```',
      'node --import tsx bench/in-a-block.ts',
      '```',
    ].join('\n');
    expect(missingNamedPaths(text)).toEqual(['src/nowhere.ts', 'bench/gone.ts']);
  });

  it('reports a link to a missing file and to a missing heading, and ignores code and URLs', () => {
    const file = join(ROOT, 'README.md');
    const text = [
      '# Title',
      '## A heading, with `code`',
      '[ok](docs/) [ok](#title) [ok](#a-heading-with-code) [ok](https://example.com/nowhere.md)',
      '[gone](docs/nowhere.md) [gone too](#nowhere) ![img](docs/missing.png)',
      '`[in code](nowhere.md)`',
      '```',
      '[in a block](nowhere-either.md)',
      '```',
    ].join('\n');
    expect(brokenLinks(file, text)).toEqual([
      'docs/nowhere.md (no such file: docs/nowhere.md)',
      '#nowhere (no heading #nowhere in README.md)',
      'docs/missing.png (no such file: docs/missing.png)',
    ]);
  });
});
