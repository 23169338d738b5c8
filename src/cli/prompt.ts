import { createInterface } from 'node:readline/promises';
import { UserError } from '../errors';

/** Whether a person is at the keyboard: stdin and stdout are both terminals. */
export const onTerminal = (): boolean => Boolean(process.stdin.isTTY && process.stdout.isTTY);

/**
 * Asks a yes/no question on the terminal (on stderr, so stdout stays the command's output). Only "y" or "yes" is yes;
 * an empty answer or the end of input is no. Ctrl-C stops the command with exit 130.
 */
export async function confirm(question: string): Promise<boolean> {
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    const answer = await new Promise<string>((resolve, reject) => {
      rl.once('SIGINT', () => reject(new UserError('stopped at the prompt', 130)));
      rl.once('close', () => resolve(''));
      rl.question(question).then(resolve, () => resolve(''));
    });
    return /^y(es)?$/i.test(answer.trim());
  } finally {
    rl.close();
  }
}
