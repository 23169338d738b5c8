/** Small output helpers shared by the commands: aligned tables and stable JSON. */
import { formatTable } from '../text-table';

export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, (_k, v) => (typeof v === 'bigint' ? v.toString() : v), 2)}\n`);
}

export function printTable(headers: string[], rows: string[][], right: number[] = []): void {
  process.stdout.write(`${formatTable(headers, rows, right)}\n`);
}
