import type { Command } from 'commander';

export function registerDevCommands(program: Command): void {
  program.command('dev').description('start, stop and inspect the local stack');
}
