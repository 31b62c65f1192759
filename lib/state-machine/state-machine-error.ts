import { IdempotencyError, IdempotencyErrorCode } from '../core/errors.js';

/** A state machine refused a transition. */
export class IllegalStateTransitionError extends IdempotencyError {
  readonly from: string;
  readonly to: string;
  /** The states `from` may move to (empty for a final or unknown state). */
  readonly allowed: readonly string[];
  /** Name of the state machine, when it was given one. */
  readonly machine: string | undefined;

  constructor(from: string, to: string, allowed: readonly string[], machine?: string) {
    const subject = machine ? `${machine}: ` : '';
    const targets =
      allowed.length > 0 ? `allowed from '${from}': ${allowed.map((s) => `'${s}'`).join(', ')}` : `no transition leaves '${from}'`;
    super(
      IdempotencyErrorCode.IllegalTransition,
      409,
      `${subject}illegal transition from '${from}' to '${to}' (${targets}).`,
      `Only request transitions the state machine declares; reload the entity to see its current state.`,
      { title: 'Illegal state transition' },
    );
    this.from = from;
    this.to = to;
    this.allowed = allowed;
    this.machine = machine;
  }
}
