import type { Command } from 'commander';

export function registerReportCommands(program: Command): void {
  program.command('report').description('usage reports and the monthly report');
}
