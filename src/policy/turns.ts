// Policy evaluation runs on the event loop, the one thread every tenant's requests share. A decision's
// cost is bounded by the step budget, but several decisions that become ready together (concurrent
// requests of one organization, a page of pending activities) would still run back to back and hold
// every other request for their sum. So a decision takes a turn first: while the steps spent since
// the event loop last ran stay under a slice, turns are granted at once (cheap policies cost no
// latency); past it, the next turn waits for the event loop to go round — serving whatever I/O
// arrived, another tenant's whoami included — and turns go round-robin across organizations, so one
// tenant queuing many expensive decisions delays another's by at most one slice.
import { STEP_BUDGET } from "./compile.js";

/** Steps the process may spend on policies before it lets the event loop run. */
export const SLICE_STEPS = Math.floor(STEP_BUDGET / 4);

let spent = 0;
/** Decisions granted a turn that have not reported yet: they run right after their grant, so a second
 * grant in the same tick would run beside the first without seeing what it cost. */
let running = 0;
let boundary: NodeJS.Immediate | null = null;
/** Waiting decisions by organization, in the order organizations came; each organization's in FIFO. */
const waiting = new Map<string, (() => void)[]>();

/** Resolves when the organization's decision may run; run it synchronously right after. */
export function evaluationTurn(organizationId: string): Promise<void> {
  if (waiting.size === 0 && running === 0 && spent < SLICE_STEPS) {
    running += 1;
    return Promise.resolve();
  }
  return new Promise((grant) => {
    const queue = waiting.get(organizationId);
    if (queue) queue.push(grant);
    else waiting.set(organizationId, [grant]);
    boundary ??= setImmediate(loopWentRound);
  });
}

/** Reported by every evaluation once it is done, whether it got a turn or not. */
export function recordSteps(steps: number): void {
  spent += steps;
  running = Math.max(0, running - 1);
  boundary ??= setImmediate(loopWentRound);
  if (running === 0 && spent < SLICE_STEPS) grantNext();
}

function loopWentRound(): void {
  boundary = null;
  spent = 0;
  // A granted decision runs within the tick of its grant: by now it has reported, or failed.
  running = 0;
  grantNext();
  // Whatever the granted decision does (it may even fail before reporting), the others move on.
  if (waiting.size > 0) boundary ??= setImmediate(loopWentRound);
}

function grantNext(): void {
  const first = waiting.entries().next();
  if (first.done) return;
  const [organizationId, queue] = first.value;
  waiting.delete(organizationId);
  const grant = queue.shift()!;
  // To the back of the line: the next turn goes to another organization if one is waiting.
  if (queue.length > 0) waiting.set(organizationId, queue);
  running += 1;
  grant();
}
