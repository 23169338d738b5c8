import { parseArgs, type ParseArgsConfig } from 'node:util';

type Options = NonNullable<ParseArgsConfig['options']>;

/**
 * A bench's options, parsed by node:util's parseArgs (an unknown option or a missing value fails with its name), and
 * the command line that ran it, which the bench prints beside its figures so that anyone can run it again.
 */
export function benchArgs<T extends Options>(script: string, options: T) {
  const { values } = parseArgs<{ options: T; strict: true; allowPositionals: false }>({ options, strict: true, allowPositionals: false });
  return { values, command: `node --import tsx ${script} ${process.argv.slice(2).join(' ')}`.trim() };
}

/** A numeric option's value; anything else fails with the option's name. */
export function numberOption(name: string, text: string | undefined): number {
  const n = Number(text);
  if (text === undefined || text.trim() === '' || !Number.isFinite(n)) throw new Error(`--${name} ${text ?? ''} is not a number`);
  return n;
}
