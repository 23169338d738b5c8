import { ServiceError } from '@temporalio/client';
import { expect, it } from 'vitest';
import { retryDeadlineExceeded } from '../../src/temporal-reads';

/** A gRPC error as grpc-js gives it: an Error with a numeric status code. */
const grpcError = (code: number, details: string) => Object.assign(new Error(`${code} ${details}`), { code, details });

/** A call that fails with the given errors, one per try, then answers. */
function failingThen<T>(errors: Error[], answer: T) {
  const call = async () => {
    call.tries++;
    const err = errors[call.tries - 1];
    if (err) throw err;
    return answer;
  };
  call.tries = 0;
  return call;
}

it('asks again after DEADLINE_EXCEEDED, bare or wrapped by the schedule client, and answers', async () => {
  const wrapped = new ServiceError('Failed to describe schedule', { cause: grpcError(4, 'context deadline exceeded') });
  const call = failingThen([grpcError(4, 'deadline exceeded'), wrapped], 'described');
  await expect(retryDeadlineExceeded(call)).resolves.toBe('described');
  expect(call.tries).toBe(3);
});

it('gives up after the third DEADLINE_EXCEEDED, with the server error', async () => {
  const call = failingThen(
    [1, 2, 3, 4].map(() => grpcError(4, 'deadline exceeded')),
    'never',
  );
  await expect(retryDeadlineExceeded(call)).rejects.toThrow('4 deadline exceeded');
  expect(call.tries).toBe(3);
});

it('does not ask again after any other error', async () => {
  const call = failingThen([grpcError(5, 'schedule not found')], 'never');
  await expect(retryDeadlineExceeded(call)).rejects.toThrow('5 schedule not found');
  expect(call.tries).toBe(1);
});
